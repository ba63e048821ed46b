#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    if sys.argv[1:] == ["version"]:
        # feedpub's release (feedpub/__init__.py) and commit (feedpub/release.py). Django
        # answers `version` itself, before any command of ours could, with its own version:
        # `manage.py --version` still does.
        from feedpub.release import described

        print(described())
        sys.exit(0)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feedpub.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
