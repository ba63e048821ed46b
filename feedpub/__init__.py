"""feedpub, the Django project. `__version__` is the one place the release is written:
pyproject.toml reads it (setuptools' dynamic version), `manage.py version` prints it, /healthz
answers it and the admin's footer shows it, each with the commit (feedpub/release.py).
CHANGELOG.md's newest release is this one."""

__version__ = "0.4.0"
