"""OAI-PMH 2.0 requests: verbs, their arguments, dates, resumption tokens, and every error.

Nothing here reads the database: a request is checked whole before any query, so that a bad
one gets its protocol error (badVerb, badArgument, badResumptionToken) and never a 5xx.

A resumption token is a position in the log and the list's arguments, written out in the
token itself: no state is kept on the server, so a token never expires, works on any web
process and after restarts, and the same token gives the same list again (apart from
changes since). See archives/oai/repository.py for why a position is safe to resume from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from functools import cached_property

from archives.parameters import RepeatedParameter, refuse_repeated
from archives.validation import xml_problem

NAMESPACE = "http://www.openarchives.org/OAI/2.0/"

# Verb -> (required arguments, optional arguments); a resumptionToken, where the verb
# takes one, is exclusive: it comes alone.
LIST_ARGUMENTS = (("metadataPrefix",), ("from", "until", "set"))
VERBS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "Identify": ((), ()),
    "ListMetadataFormats": ((), ("identifier",)),
    "ListSets": ((), ()),
    "ListIdentifiers": LIST_ARGUMENTS,
    "ListRecords": LIST_ARGUMENTS,
    "GetRecord": (("identifier", "metadataPrefix"), ()),
}
RESUMABLE = {"ListSets", "ListIdentifiers", "ListRecords"}

# The patterns of OAI-PMH.xsd (metadataPrefixType, setSpecType), so that an argument
# echoed in <request> always validates.
PREFIX_RE = re.compile(r"[A-Za-z0-9\-_.!~*'()]+")
SET_SPEC_RE = re.compile(r"[A-Za-z0-9\-_.!~*'()]+(:[A-Za-z0-9\-_.!~*'()]+)*")
# An identifier is a URI (identifierType): a scheme, then no space or control character.
URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s\"<>\\^`{|}]+")
# ASCII digits only: \d and strptime also take other scripts' digits, which OAI-PMH.xsd's
# date types (echoed in <request>) do not.
DAY_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
SECOND_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
GRANULARITY = "YYYY-MM-DDThh:mm:ssZ"


class OAIError(Exception):
    """A protocol error: its code (OAI-PMH 2.0 section 3.6) and what is wrong, in words."""

    def __init__(self, code: str, message: str, *, response_second: int | None = None):
        super().__init__(message)
        self.code = code
        # A message may quote the request, which may hold what XML cannot carry.
        self.message = ascii(message)[1:-1] if xml_problem(message) else message
        self.response_second = response_second  # the answer's responseDate, if not now's

    @property
    def echoes_arguments(self) -> bool:
        """Whether <request> may repeat the arguments: not for a bad verb or argument, whose
        request element is the base URL alone (section 3.2)."""
        return self.code not in ("badVerb", "badArgument")


def bad_argument(message: str) -> OAIError:
    return OAIError("badArgument", message)


@dataclass(frozen=True)
class Position:
    """Where a list resumes: after the record with this (datestamp, id), in that order."""

    datestamp: datetime
    id: int


@dataclass(frozen=True)
class ListState:
    """A list request's arguments and how far its list has been delivered.

    `start`/`end` bound the records' datestamps (inclusive, exclusive), from `from` and
    `until`. `delivered` counts what earlier answers of the list returned (the token's
    cursor) and `size` is the list's size when it began (completeListSize). `floor`, when
    set, caps the responseDate of the rest of the list (repository.py explains when).
    """

    verb: str
    prefix: str = ""
    set_spec: str | None = None
    from_: str | None = None
    until: str | None = None
    after: Position | int | None = None  # a record's position, or the last set's feed id
    delivered: int = 0
    size: int = 0
    floor: int | None = None  # a UNIX second

    @property
    def start(self) -> datetime | None:
        return None if self.from_ is None else parse_date(self.from_)[0]

    @property
    def end(self) -> datetime | None:
        if self.until is None:
            return None
        moment, is_day = parse_date(self.until)
        try:  # until names the last day or second that is in the list
            return moment + (timedelta(days=1) if is_day else timedelta(seconds=1))
        except OverflowError:
            return None

    def resumed(self, *, after: Position | int, delivered: int, size: int,
                floor: int | None) -> ListState:
        return replace(self, after=after, delivered=delivered, size=size, floor=floor)


@dataclass
class Request:
    verb: str
    arguments: dict[str, str]  # as given, for <request>

    @property
    def resuming(self) -> bool:
        return "resumptionToken" in self.arguments

    @cached_property
    def state(self) -> ListState | None:
        """A list verb's arguments and position: from its token (read here, so that a bad
        token's error still names the verb and token it was sent with), or a new list."""
        if self.resuming:
            return read_token(self.verb, self.arguments["resumptionToken"])
        if self.verb in ("ListIdentifiers", "ListRecords"):
            return ListState(self.verb, prefix=self.arguments["metadataPrefix"],
                             set_spec=self.arguments.get("set"),
                             from_=self.arguments.get("from"),
                             until=self.arguments.get("until"))
        return ListState(self.verb) if self.verb == "ListSets" else None

    @property
    def list_state(self) -> ListState:
        """`state`, for the handlers of the list verbs, which always have one."""
        if self.state is None:
            raise TypeError(f"{self.verb} is not a list verb")
        return self.state


def parse(params: Mapping[str, Sequence[str]]) -> Request:
    """A request from its parameters (a QueryDict's lists), or OAIError."""
    try:
        refuse_repeated(params, ["verb"])
    except RepeatedParameter as error:
        raise OAIError("badVerb", str(error)) from None
    verbs = params.get("verb") or []
    if not verbs:
        raise OAIError("badVerb", "The request names no verb: add verb=Identify, "
                                  "ListRecords or another OAI-PMH verb.")
    verb = verbs[0]
    if verb not in VERBS:
        raise OAIError("badVerb", f"{verb!r} is not an OAI-PMH verb; the verbs are "
                                  f"{', '.join(VERBS)}.")
    return Request(verb, _arguments(verb, {name: values for name, values in params.items()
                                           if name != "verb"}))


def _arguments(verb: str, given: Mapping[str, Sequence[str]]) -> dict[str, str]:
    required, optional = VERBS[verb]
    allowed = {*required, *optional} | ({"resumptionToken"} if verb in RESUMABLE else set())
    illegal = sorted(set(given) - allowed)
    if illegal:
        takes = ", ".join(sorted(allowed)) or "no other argument"
        raise bad_argument(f"{verb} does not take {', '.join(map(repr, illegal))} (it takes "
                           f"{takes}).")
    try:
        refuse_repeated(given, given)
    except RepeatedParameter as error:
        raise bad_argument(str(error)) from None
    arguments = {name: values[0] for name, values in given.items()}
    for name, value in arguments.items():
        if not value or xml_problem(value):
            raise bad_argument(f"The argument {name} is empty or holds characters XML "
                               "cannot carry.")
    if "resumptionToken" in arguments:
        if len(arguments) > 1:
            raise bad_argument("resumptionToken is an exclusive argument: send it with the "
                               "verb alone.")
        return arguments
    missing = [name for name in required if name not in arguments]
    if missing:
        raise bad_argument(f"{verb} needs the argument {', '.join(missing)}.")
    _check_syntax(arguments)
    return arguments


def _check_syntax(arguments: dict[str, str]) -> None:
    prefix = arguments.get("metadataPrefix")
    if prefix is not None and not PREFIX_RE.fullmatch(prefix):
        raise bad_argument(f"{prefix!r} is not a metadataPrefix (letters, digits and "
                           "-_.!~*'() only).")
    spec = arguments.get("set")
    if spec is not None and not SET_SPEC_RE.fullmatch(spec):
        raise bad_argument(f"{spec!r} is not a setSpec.")
    identifier = arguments.get("identifier")
    if identifier is not None and not URI_RE.fullmatch(identifier):
        raise bad_argument(f"{identifier!r} is not an identifier: identifiers are URIs, "
                           "such as the ones ListIdentifiers gives.")
    dates = {name: arguments[name] for name in ("from", "until") if name in arguments}
    granularities = {name: parse_date(value, argument=name)[1] for name, value in dates.items()}
    if len(set(granularities.values())) > 1:
        raise bad_argument("from and until must have the same granularity (both days, "
                           "YYYY-MM-DD, or both seconds, YYYY-MM-DDThh:mm:ssZ).")
    if len(dates) == 2 and parse_date(dates["from"])[0] > parse_date(dates["until"])[0]:
        raise bad_argument(f"from ({dates['from']}) is later than until ({dates['until']}).")


def parse_date(value: str, *, argument: str = "date") -> tuple[datetime, bool]:
    """A from/until value as a UTC instant, and whether it names a day."""
    is_day = bool(DAY_RE.fullmatch(value))
    if not is_day and not SECOND_RE.fullmatch(value):
        raise bad_argument(f"{argument}={value!r} is not a date: use YYYY-MM-DD or "
                           f"{GRANULARITY} (UTC).")
    try:
        if is_day:
            return datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC), True
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC), False
    except ValueError:
        raise bad_argument(f"{argument}={value!r} is not a date of the calendar.") from None


def datestamp(moment: datetime) -> str:
    """A UTC instant at the repository's granularity (seconds, truncated). (isoformat: a
    list answer writes two a record, and strftime costs three times as much.)"""
    return moment.astimezone(UTC).isoformat(timespec="seconds")[:19] + "Z"


# Resumption tokens ---------------------------------------------------------------------
# verb,prefix,set,from,until,datestamp-us,id,delivered,size,floor for the record lists and
# ListSets,feed-id,delivered,size for the sets. A comma is in none of the patterns above.

MAX_INT = 2**63 - 1
NUMBER = r"(0|[1-9][0-9]{0,18})"


def make_token(state: ListState) -> str:
    def text(value) -> str:
        return "" if value is None else str(value)

    if state.verb == "ListSets":
        fields = [state.verb, state.after, state.delivered, state.size]
    else:
        position = state.after
        if not isinstance(position, Position):  # a record list resumes after a record
            raise TypeError(f"{state.verb} resumes after a record, not after {position!r}")
        micros = _micros(position.datestamp)
        fields = [state.verb, state.prefix, state.set_spec, state.from_, state.until,
                  micros, position.id, state.delivered, state.size, state.floor]
    return ",".join(map(text, fields))


def read_token(verb: str, token: str) -> ListState:
    bad = OAIError("badResumptionToken",
                   f"{token[:200]!r} is not a resumption token of {verb} from this "
                   "repository. (Tokens never expire; this one was not issued here, or "
                   "was issued for another verb.)")
    fields = token.split(",")
    try:
        if verb == "ListSets":
            name, after, delivered, size = fields
            numbers = [_number(after), _number(delivered), _number(size)]
            if name != verb:
                raise ValueError
            return ListState(verb, after=numbers[0], delivered=numbers[1], size=numbers[2])
        name, prefix, spec, from_, until, micros, record, delivered, size, floor = fields
        if name != verb or not PREFIX_RE.fullmatch(prefix):
            raise ValueError
        arguments = {"metadataPrefix": prefix, "set": spec, "from": from_, "until": until}
        _check_syntax({name: value for name, value in arguments.items() if value})
        position = Position(_moment(_number(micros)), _number(record))
        return ListState(verb, prefix=prefix, set_spec=spec or None, from_=from_ or None,
                         until=until or None, after=position, delivered=_number(delivered),
                         size=_number(size), floor=_number(floor) if floor else None)
    except (ValueError, OverflowError, OAIError):
        raise bad from None


def _number(text: str) -> int:
    if not re.fullmatch(NUMBER, text) or int(text) > MAX_INT:
        raise ValueError(text)
    return int(text)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def _moment(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)
