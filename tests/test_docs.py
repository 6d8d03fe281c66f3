"""The README and docs/ stay true to the project: every relative link and #anchor resolves, no absolute path of
a developer's machine appears in the docs, the configs or the code, and every console command is in the README
with a line on what it does. Each check also runs on a deliberately broken copy, where it must find the fault."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from conftest import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
# A home, scratch or mount folder of someone's machine; /usr, /proc and /dev paths are the system's own.
MACHINE_PATH = re.compile(r"(?<![\w.:/~-])/(?:home|root|work|tmp|Users|mnt|scratch|private|var/folders)/\S")


def pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The page without its fenced code blocks (their brackets are code, not links)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", prose(page.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")
        anchor, n = slug, 1
        while anchor in found:
            anchor, n = f"{slug}-{n}", n + 1
        found.add(anchor)
    return found


def broken_links(root: Path) -> list[str]:
    problems = []
    for page in pages(root):
        for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}: {target}"
            if not linked.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{where} (no such heading)")
    return problems


def machine_paths(root: Path) -> list[str]:
    """In the docs, the result files they are generated from, the configs and the code."""
    files = [*pages(root), *sorted((root / "docs" / "results").glob("*.json")),
             *sorted((root / "conf").rglob("*.yaml")), *sorted((root / "src").rglob("*.py")), root / "train.py",
             *sorted((root / "scripts").glob("*.py"))]
    return [f"{path.relative_to(root)}:{number}: {line.strip()}" for path in files
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            if MACHINE_PATH.search(line)]


MAX_WORDS = 16_000  # the README and docs/ together: a front page and a reference, not a lab notebook


def words(root: Path) -> int:
    """Words in the README and docs/, counted as `wc -w` counts them."""
    return sum(len(page.read_text(encoding="utf-8").split()) for page in pages(root))


def subcommands(root: Path) -> list[str]:
    """The `nameorigin` subcommands, as its registry names them (COMMANDS in src/nameorigin/cli/app.py)."""
    text = (root / "src" / "nameorigin" / "cli" / "app.py").read_text(encoding="utf-8")
    return re.findall(r'"([\w-]+)": "nameorigin\.cli\.\w+:\w+"', text)


def unexplained_commands(root: Path) -> list[str]:
    """Subcommands of `nameorigin` that no row of the README's command table names with a line on what it does."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    return [name for name in subcommands(root)
            if not re.search(rf"^\| [^|]*`(?:nameorigin )?{re.escape(name)}\b[^`]*`[^|]*\| \w.{{10,}}\|", readme,
                             re.M)]


# A folder above the repository: a command or a doc that reaches outside the project.
OUTSIDE = re.compile(r"(?<![\w.])\.\./")
# A commit's abbreviated or full hash: hex with both digits and letters (sha256 digests are 64 long, not matched).
COMMIT = re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")
# Phrases only the history of the work uses: the docs say what is, git log says what was.
HISTORY = re.compile(r"\b(as before|before this change|used to (?:print|be|give|take)|previously|this commit|"
                     r"the old code|than before|at commit|was changed to|now (?:prints|gives|takes))\b", re.I)
# A pointer from the code, a config or a script into the docs: docs/<page>.md#<anchor> or docs/<page>.md, "<Heading>".
POINTER = re.compile(r"docs/([\w-]+\.md)(?:#([\w-]+)|, \"([^\"]+)\")?")


def project_files(root: Path) -> list[Path]:
    return [*pages(root), *sorted((root / "conf").rglob("*.yaml")), *sorted((root / "scripts").iterdir()),
            *sorted((root / "src").rglob("*.py")), *sorted((root / "benchmarks").glob("*.py")), root / "Makefile"]


def outside_paths(root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{number}" for path in project_files(root) if path.is_file()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            if OUTSIDE.search(line)]


def commit_hashes(root: Path) -> list[str]:
    return [f"{page.relative_to(root)}: {found}" for page in pages(root)
            for found in COMMIT.findall(page.read_text(encoding="utf-8"))]


def history_words(root: Path) -> list[str]:
    """In the docs, configs and scripts: what users read as they are."""
    files = [*pages(root), *sorted((root / "conf").rglob("*.yaml")), *sorted((root / "scripts").iterdir())]
    return [f"{path.relative_to(root)}: {found.group(0)}" for path in files if path.is_file()
            for found in HISTORY.finditer(path.read_text(encoding="utf-8"))]


def broken_pointers(root: Path) -> list[str]:
    """Pointers from the code, configs and scripts (--help texts among them) into the docs that do not resolve."""
    problems = []
    for path in project_files(root)[len(pages(root)):]:
        if not path.is_file():
            continue
        for page, anchor, heading in POINTER.findall(path.read_text(encoding="utf-8")):
            target = root / "docs" / page
            slug = anchor or re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
            if not target.exists() or slug and slug not in anchors(target):
                problems.append(f"{path.relative_to(root)}: docs/{page}{'#' + slug if slug else ''}")
    return problems


def unlisted_modules(root: Path) -> list[str]:
    """Modules of src/nameorigin that configuration.md's module table does not name (in its row, by file name)."""
    rows = {row.split("|")[1].strip().strip("`"): row for row in
            (root / "docs" / "configuration.md").read_text(encoding="utf-8").splitlines() if row.startswith("| `")}
    package = root / "src" / "nameorigin"
    listed = "".join(rows.values())
    missing = []
    for module in sorted(package.rglob("*.py")):
        relative = module.relative_to(package)
        if module.name == "__init__.py":
            continue
        row = rows.get(f"{relative.parts[0]}/", "") if len(relative.parts) > 1 else listed
        if f"`{module.name}`" not in row:
            missing.append(str(relative))
    return missing


def test_every_relative_link_and_anchor_resolves():
    assert broken_links(ROOT) == []


def test_no_absolute_path_of_a_developers_machine():
    assert machine_paths(ROOT) == []


def test_no_path_outside_the_repository_no_commit_hash_no_history():
    assert outside_paths(ROOT) == [] and commit_hashes(ROOT) == [] and history_words(ROOT) == []


def test_the_docs_stay_within_their_word_budget():
    assert words(ROOT) <= MAX_WORDS


def test_every_module_is_in_the_module_table():
    assert unlisted_modules(ROOT) == []


def test_every_pointer_from_the_code_into_the_docs_resolves():
    assert broken_pointers(ROOT) == []


def test_every_subcommand_is_in_the_readme_with_what_it_does():
    assert len(subcommands(ROOT)) == 11 and unexplained_commands(ROOT) == []


def test_each_check_finds_the_fault_in_a_broken_copy(tmp_path):
    copy = tmp_path / "repo"
    for part in ("README.md", "pyproject.toml", "train.py", "Makefile"):
        shutil.copy(ROOT / part, copy / part if copy.exists() else (copy.mkdir(), copy / part)[1])
    for folder in ("docs", "conf", "scripts", "src", "benchmarks"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    readme = (copy / "README.md").read_text(encoding="utf-8")
    broken = readme + "\n[gone](docs/no-such-page.md) and [moved](docs/serving.md#no-such-section)\n"
    broken = re.sub(r"^\| `nameorigin export[^\n]*\n", "", broken, count=1, flags=re.M)
    (copy / "README.md").write_text(broken, encoding="utf-8")
    speed = copy / "docs" / "speed.md"
    speed.write_text(speed.read_text(encoding="utf-8") + "\nRun `/home/someone/bench.py` first.\n", encoding="utf-8")
    last = len(speed.read_text(encoding="utf-8").splitlines())
    result = copy / "docs" / "results" / "pretrain.json"
    result.write_text(result.read_text(encoding="utf-8").replace('"command": "', '"command": "cd /tmp/x; ', 1))
    line, text = next((number, text.strip()) for number, text in enumerate(result.read_text().splitlines(), start=1)
                      if "/tmp/x" in text)
    (copy / "docs" / "long.md").write_text("word " * (MAX_WORDS - words(copy) + 1), encoding="utf-8")
    assert words(copy) == MAX_WORDS + 1
    assert broken_links(copy) == ["README.md: docs/no-such-page.md (no such file)",
                                  "README.md: docs/serving.md#no-such-section (no such heading)"]
    assert machine_paths(copy) == [f"docs/speed.md:{last}: Run `/home/someone/bench.py` first.",
                                   f"docs/results/pretrain.json:{line}: {text}"]
    assert unexplained_commands(copy) == ["export"]
    assert outside_paths(copy) == commit_hashes(copy) == history_words(copy) == broken_pointers(copy) == []
    (copy / "docs" / "nana.md").write_text("Run `python train.py data.root=../shared/names` as before, at 02212bc.\n")
    sizing = copy / "src" / "nameorigin" / "training" / "sizing.py"
    sizing.write_text(sizing.read_text(encoding="utf-8").replace("#settings-that-fit-the-data", "#gone"))
    assert outside_paths(copy) == ["docs/nana.md:1"] and commit_hashes(copy) == ["docs/nana.md: 02212bc"]
    assert history_words(copy) == ["docs/nana.md: as before"]
    assert broken_pointers(copy) == ["src/nameorigin/training/sizing.py: docs/configuration.md#gone"]
    assert unlisted_modules(copy) == []
    (copy / "src" / "nameorigin" / "serving" / "fresh.py").write_text('"""A module nobody listed."""\n')
    assert unlisted_modules(copy) == ["serving/fresh.py"]
