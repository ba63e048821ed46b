"""Settings for the benchmark: the production settings plus bench-only URLs.

bench/benchurls.py adds the constant-body view and the django.contrib.syndication feed
that the benchmark compares against; they never exist in the production URLconf.
"""

from feedpub.settings import *  # noqa: F403

ROOT_URLCONF = "bench.benchurls"
