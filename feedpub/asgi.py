"""The ASGI application: Django's, behind the long-polling route (archives/serving/longpoll.py).

Run it under uvicorn for long polls only (`deploy/entrypoint.sh longpoll`); everything else
is served faster by gunicorn's sync workers (feedpub/wsgi.py), where nothing waits.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feedpub.settings")
django_application = get_asgi_application()

from archives.serving.longpoll import LongPolling  # noqa: E402 (needs the apps loaded above)

application = LongPolling(django_application)
