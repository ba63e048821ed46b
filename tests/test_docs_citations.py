"""Everything the project cites is inside it: every repository path that a comment, a
docstring, a doc, the README, a config or a benchmark names exists (a Markdown file's
`#anchor` too), every README section cited by name is a heading of README.md, and every
`Model.objects.method` named exists. (Links between pages of docs/ are checked by the
site's strict build, `mkdocs build --strict`; this covers everything else.)

In Python files the comments and docstrings are read (string literals in code are data:
`"feeds/a/archives/1/index.xml"`); in every other file, all of it. A path is a relative one
with a `/` and a file extension (`archives/formats.py`, `../how-it-works/log.md#the-write-path`),
or a bare upper-case Markdown name (`DESIGN.md`), found from the repository's root, the
citing file's folder or one above it. What is not a citation of a repository file is in
NOT_FILES and NOT_FILE_PREFIXES, each with why.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
import unicodedata
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".sh", ".txt", ".conf", ".template",
                 ".example", ".cfg", ".html", ".css", ".js", ".xsd", ".ini"}
TEXT_NAMES = {"Dockerfile", "run", ".dockerignore", ".gitignore", ".env.example"}
EXTENSIONS = ("py|md|txt|yml|yaml|toml|sh|conf|template|xsd|json|jsonl|csv|html|css|js|cfg"
              "|ini|svg|png|sqlite3|xml")
# A relative path: not part of a URL or an absolute path (nothing path-like before it).
PATH = re.compile(rf"(?<![\w/.~$:@%{{}}<-])((?:\.\./)*(?:[\w.-]+/)+[\w.-]+\.(?:{EXTENSIONS}))"
                  r"(#[\w-]+)?(?![\w/-])")
# Any path that climbs out of its file's folder, a folder too (`../shared/specs/`).
CLIMBING = re.compile(r"(?<![\w/.~-])(\.\./[\w./-]*)")
BARE_MARKDOWN = re.compile(r"(?<![\w/.-])([A-Z][A-Z_]+\.md)(#[\w-]+)?\b")
README_SECTION = re.compile(r"""\bREADME(?:\.md)?(?:'s)?,? ["“]([^"”]+)["”]""")
# A Markdown link to a heading of its own page (README.md's and other pages outside docs/).
OWN_ANCHOR = re.compile(r"\]\(#([\w-]+)\)")
MANAGER_METHOD = re.compile(r"\b([A-Z]\w*)\.objects\.(\w+)")

# Paths named in the text that are not files of the repository, and why.
NOT_FILES = {
    "rss/open.xml",  # an exported page's file, under feeds/<slug>/ (archives/storage/export.py)
}
NOT_FILE_PREFIXES = (
    "bench/.work/",  # the benchmarks' working folder, written as they run
    ".venv/",  # the virtual environment a reader makes
    "admin/",  # Django's admin templates, which templates/admin/ extends
    "conf.d/",  # the nginx image's folder, where the deploy template is rendered
)


def repository_files() -> list[Path]:
    try:
        listed = subprocess.run(  # noqa: S603
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],  # noqa: S607
            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
        paths = [ROOT / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        paths = [path for path in ROOT.rglob("*") if ".git" not in path.parts]
    return sorted(path for path in paths if path.is_file() and (
        path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES))


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default slugify)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def headings(path: Path) -> dict[str, str]:
    """slug -> heading text of a Markdown file's headings (outside fenced blocks)."""
    found, fenced = {}, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} +(.+?) *#*$", line)):
            found[slug(match.group(1))] = match.group(1).replace("`", "")
    return found


def resolve(cited: str, citing: Path) -> Path | None:
    """The file a citation names: from the repository's root, the citing file's folder or
    one above it (`documents/base.py` in archives/log/), Django's template folders (the
    project's and the app's), or mkdocs.yml's docs_dir."""
    bases = [ROOT, *citing.parents, ROOT / "templates", ROOT / "archives" / "templates",
             ROOT / "docs"]
    for base in bases:
        candidate = (base / cited).resolve()
        if candidate.is_relative_to(ROOT) and candidate.is_file():
            return candidate
    return None


def prose(path: Path) -> str:
    """What a file says to its reader: a Python file's comments and docstrings, each at its
    own line (the rest blanked), or the whole of any other file."""
    text = path.read_text(errors="replace")
    if path.suffix != ".py":
        return text
    lines = [""] * (text.count("\n") + 1)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            lines[token.start[0] - 1] += token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body[0] if node.body else None
            if (isinstance(body, ast.Expr) and isinstance(body.value, ast.Constant)
                    and isinstance(body.value.value, str)):
                for offset, line in enumerate(body.value.value.splitlines()):
                    lines[body.lineno - 1 + offset] += " " + line
    return "\n".join(lines)


def problems_of(citing: Path, text: str | None = None) -> list[str]:
    """What `citing` (or `text`, as if it were that file's) cites that is not there."""
    if text is None:
        text = prose(citing)
    where = citing.relative_to(ROOT)
    problems = []
    cited = [(m.start(), m.group(1), m.group(2)) for m in PATH.finditer(text)]
    cited += [(m.start(), m.group(1), m.group(2)) for m in BARE_MARKDOWN.finditer(text)]
    for start, path, anchor in cited:
        line = text.count("\n", 0, start) + 1
        if path in NOT_FILES or path.startswith(NOT_FILE_PREFIXES):
            continue
        found = resolve(path, citing)
        if found is None:
            problems.append(f"{where}:{line}: cites {path}, which the repository does not have")
        elif anchor and found.suffix == ".md" and anchor[1:] not in headings(found):
            problems.append(f"{where}:{line}: cites {path}{anchor}, a heading {path} lacks")
    for match in CLIMBING.finditer(text):
        target = (citing.parent / match.group(1)).resolve()
        if not (target.is_relative_to(ROOT) and target.exists()):
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{where}:{line}: cites {match.group(1)}, outside the repository "
                            "or not in it")
    if citing.suffix == ".md":
        for match in OWN_ANCHOR.finditer(text):
            if match.group(1) not in headings(citing):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{where}:{line}: links to #{match.group(1)}, a heading "
                                "this page lacks")
    readme = headings(ROOT / "README.md")
    for match in README_SECTION.finditer(text):
        if slug(match.group(1)) not in readme:
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{where}:{line}: cites README section {match.group(1)!r}, which "
                            f"README.md does not have (its sections: {list(readme.values())})")
    return problems


def test_the_scan_finds_what_it_looks_for():
    """The patterns catch the citations this test exists for, and pass real ones."""
    text = ('see DESIGN.md "HTTP" and specs/linked-pages-feed.txt; README "Exported pages";\n'
            "the schemas of `../shared/specs/oai-pmh/`\n"
            "fine: archives/formats.py, docs/how-it-works/log.md#the-write-path, README \"Quick "
            'start", https://example.org/a/b.md, /srv/x.xml, ../how-it-works/caching.md\n'
            "broken anchor: docs/how-it-works/log.md#no-such-heading\n")
    problems = problems_of(ROOT / "docs" / "how-it-works" / "sample.md", text)
    assert len(problems) == 5, problems
    assert any("../shared/specs/oai-pmh/" in problem for problem in problems)
    assert any("DESIGN.md" in problem for problem in problems)
    assert any("specs/linked-pages-feed.txt" in problem for problem in problems)
    assert any("'Exported pages'" in problem for problem in problems)
    assert any("#no-such-heading" in problem for problem in problems)


def test_every_cited_path_section_and_anchor_exists():
    problems = [problem for path in repository_files() if path != Path(__file__)
                for problem in problems_of(path)]
    assert not problems, "\n".join(problems)


def test_every_manager_method_named_exists():
    from django.apps import apps

    models = {model.__name__: model for model in apps.get_models()}
    problems = []
    for path in repository_files():
        text = prose(path)
        for match in MANAGER_METHOD.finditer(text):
            name, method = match.groups()
            if name in models and not hasattr(models[name].objects, method):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{path.relative_to(ROOT)}:{line}: {name}.objects.{method} "
                                "does not exist")
    assert not problems, "\n".join(problems)
