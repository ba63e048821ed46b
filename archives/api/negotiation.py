"""REST_FRAMEWORK["DEFAULT_CONTENT_NEGOTIATION_CLASS"]: DRF's, with `?format=` read by the
rule of every door (archives.parameters): given twice, it is refused, not taken at its last
value. For every DRF view, the schema's and the API root's too."""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation

from archives.parameters import refuse_repeated


class SingleFormatNegotiation(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        refuse_repeated(request.query_params, [self.settings.URL_FORMAT_OVERRIDE])
        return super().select_renderer(request, renderers, format_suffix)
