# feedpub: one image for every process of a deployment (see deploy/entrypoint.sh):
#   migrate | web (gunicorn + whitenoise) | longpoll (uvicorn) | sealer (seal_archives --watch)
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=feedpub.settings
# The image runs production settings: SECRET_KEY is then required, and HTTPS hardening is
# on (feedpub/settings.py). The DEBUG=true default is for `manage.py runserver` in a checkout.
ENV DEBUG=false

WORKDIR /app

# Dependencies first, so a code change does not reinstall them: the consumer's
# (consumer/pyproject.toml) and the server's (pyproject.toml), with every package they pull
# in pinned by deploy/constraints.txt. The server's requirement of feedpub-consumer itself is
# left out here: that distribution is not on an index but in consumer/, installed next.
COPY pyproject.toml ./
COPY consumer/pyproject.toml consumer/pyproject.toml
COPY deploy/constraints.txt deploy/constraints.txt
RUN python -c "import tomllib; print('\n'.join(d for f in ('consumer/pyproject.toml', 'pyproject.toml') for d in tomllib.load(open(f, 'rb'))['project']['dependencies'] if not d.startswith('feedpub-consumer')))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt -c deploy/constraints.txt \
    && rm /tmp/requirements.txt

# The consumer tools (feedpub-harvest, feedpub-checkfeed, and the code `manage.py harvest`,
# `checkfeed` and every progress bar use), whose requirements are already met (pip check).
COPY consumer consumer
RUN pip install --no-deps ./consumer && pip check

# What the processes run, and nothing else: no tests, benchmarks, documentation or CI
# (.dockerignore keeps them out of the build context too; tests/test_deploy.py checks both).
COPY manage.py ./
# The licence goes wherever the code does (its second clause: redistributions in binary form).
COPY LICENSE ./
COPY feedpub feedpub
COPY archives archives
COPY templates templates
COPY deploy deploy

# Static files are collected into the image and served by whitenoise; the build needs a
# throwaway key because settings refuse to load without one when DEBUG is off.
RUN SECRET_KEY=collectstatic-only-not-a-secret python manage.py collectstatic --noinput \
    && useradd --system --uid 10001 --home-dir /app feedpub \
    && install -d -o feedpub -m 755 /srv/feedpub/pages

# The commit the image is built from, for `manage.py version`, /healthz and the admin's footer
# (feedpub/release.py): an image has no .git. docker-compose.yml passes FEEDPUB_COMMIT on:
# `FEEDPUB_COMMIT=$(git rev-parse HEAD) docker compose build`. Without it, a release
# archive's feedpub/COMMIT (written by git archive) is kept, else the commit is "unknown".
ARG FEEDPUB_COMMIT=
RUN if [ -n "$FEEDPUB_COMMIT" ]; then printf '%s\n' "$FEEDPUB_COMMIT" > feedpub/COMMIT; fi

USER feedpub
EXPOSE 8000
# GET /healthz with a Host that ALLOWED_HOSTS accepts (deploy/healthcheck.py).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "deploy/healthcheck.py"]
ENTRYPOINT ["deploy/entrypoint.sh"]
CMD ["web"]
