"""The API's policy, held by its views rather than by the project's REST_FRAMEWORK: who may
write, what a body may be, how often a client may ask, how errors answer. A project that
installs the app without copying a settings block gets this API, never DRF's defaults
(anyone may write, a body of any size, no throttle, DRF's own error shapes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.throttling import BaseThrottle

from .authentication import TokenAuthentication
from .exceptions import handle
from .negotiation import SingleFormatNegotiation
from .parsers import LimitedJSONParser
from .permissions import ModelPermissionsOrReadOnly, TokenMayWrite
from .throttling import AnonThrottle, UserThrottle

if TYPE_CHECKING:  # (the stubs' name for a permission class or its composition)
    from rest_framework.permissions import _PermissionClass


class ApiPolicy:
    """Mixed into every DRF view of the app, before the view class."""

    authentication_classes: Sequence[type[BaseAuthentication]] = [TokenAuthentication,
                                                                  SessionAuthentication]
    permission_classes: Sequence[_PermissionClass] = [ModelPermissionsOrReadOnly]
    parser_classes: Sequence[type[BaseParser]] = [LimitedJSONParser]
    throttle_classes: Sequence[type[BaseThrottle]] = [AnonThrottle, UserThrottle]
    content_negotiation_class: type[BaseContentNegotiation] = SingleFormatNegotiation

    def get_permissions(self) -> list[Any]:
        # First, whatever the view's own: a read-only token is refused every write. (The
        # mixin has no base for mypy to find APIView's method in.)
        return [TokenMayWrite(), *super().get_permissions()]  # type: ignore[misc]

    def get_exception_handler(self) -> Callable[[Exception, dict], Any]:
        return handle
