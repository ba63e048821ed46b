import os

from django.core.wsgi import get_wsgi_application
from django.urls import reverse

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feedpub.settings")
application = get_wsgi_application()

# Loaded here, what gunicorn's preload_app loads once in its master and every worker shares;
# else each worker's first request imports the URLconf (~300 ms), and its first reverse()
# (a document's links) and seal on write build the URL maps and import the sealer (~20 ms):
# a tail in the first seconds after every start.
reverse("archives:subscription", args=["any"])
import archives.log.sealing  # noqa: E402, F401
