"""Request parameters as every door reads them: the documents and pages, the API, OAI-PMH,
the WebSub hub. A parameter given more than once is refused, never resolved: Django's
`QueryDict.get` takes the last value silently, so `?format=html&format=atom` would be
served as Atom while the client may have meant either.

Each door asks for its parameters here and answers RepeatedParameter in its own way: a 400
naming the parameter (plain text, or JSON for the API and JSON clients), OAI-PMH's
badArgument. Left unanswered, it is a Django BadRequest: a 400 still, never a 500.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from django.core.exceptions import BadRequest
from django.utils.datastructures import MultiValueDict

# A QueryDict (request.GET or POST), or the dict of its lists.
Parameters = MultiValueDict | Mapping[str, Sequence[str]]


class RepeatedParameter(BadRequest):
    """Parameters given more than once; `names` says which."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        listed = ", ".join(self.names)
        super().__init__(f"The parameter {listed} is given more than once; give it once."
                         if len(self.names) == 1 else
                         f"The parameters {listed} are given more than once; give each once.")


def _values(parameters: Parameters, name: str) -> Sequence[str]:
    if isinstance(parameters, MultiValueDict):
        return parameters.getlist(name)
    return parameters.get(name, ())


def refuse_repeated(parameters: Parameters, names: Iterable[str]) -> None:
    """Raise RepeatedParameter if any of `names` is given more than once."""
    repeated = sorted(name for name in set(names) if len(_values(parameters, name)) > 1)
    if repeated:
        raise RepeatedParameter(repeated)


def single(parameters: Parameters, name: str) -> str | None:
    """The one value of parameter `name` (None when it is not given), or RepeatedParameter."""
    refuse_repeated(parameters, [name])
    values = _values(parameters, name)
    return values[0] if values else None
