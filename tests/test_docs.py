"""The front page and the docs site: the site builds with ``mkdocs build --strict`` (every page in the nav, every
link and anchor resolving, offline), every ``gymforge`` command the README and the docs show names a real command
with options it has, every ``make`` target they name exists, every branch of ``tasks/`` has its page, and the README
stays a front page."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE_COMMAND = re.compile(r"`((?:gymforge|make) [^`]+)`")


def test_the_site_builds_strictly_and_offline(tmp_path: Path) -> None:
    """About 3 s: MkDocs renders every page (a warning fails the strict build)."""
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                            str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                           capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
                           env=os.environ | {"NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "bench" / "RESULTS" / "index.html").is_file()  # the measured results are pages


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    assert "make demo" in text and "make test" in text
    linked = re.findall(r"\]\((docs/[\w/.-]+\.md)\)", text)
    assert linked and [page for page in linked if not (ROOT / page).is_file()] == []


def test_every_branch_has_its_page() -> None:
    branches = sorted(init.parent.name for init in (ROOT / "tasks").glob("*/__init__.py"))
    assert branches and [b for b in branches if not (ROOT / "docs" / "branches" / f"{b}.md").is_file()] == []


# --- the commands the pages show ----------------------------------------------------------------------------------


def shown_commands(text: str) -> list[str]:
    """Every ``gymforge`` and ``make`` command of a page: each command of its shell blocks (continuation lines
    joined, comments cut, pipelines and ``&&`` lists split) and each one quoted inline in its prose."""
    commands = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            commands += _split(re.split(r"\s#", line, maxsplit=1)[0])
    for quoted in INLINE_COMMAND.findall(text):
        commands += _split(quoted)
    return [c for c in commands if c and Path(c.split()[0]).name in ("gymforge", "make")]


def _split(line: str) -> list[str]:
    return [part.strip() for part in re.split(r"&&|\|\||[|;&]", line)]


def command_problem(command: str) -> str | None:
    """What is wrong with ``command`` (a subcommand or option the CLI lacks, a target the Makefile lacks), or None."""
    tokens = shlex.split(command)
    if Path(tokens[0]).name == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE))
        return None if tokens[1] in targets else f"no make target {tokens[1]!r}"
    import typer

    from flows.cli import app

    node, path = typer.main.get_command(app), ["gymforge"]
    options, values = _options(node), 0
    for token in tokens[1:]:
        token = token.strip("[]")
        if values:  # the value of the option before
            values -= 1
        elif token.startswith("-"):
            name = token.split("=")[0]
            if name not in options:
                return f"{' '.join(path)} has no option {name}"
            values = 0 if "=" in token else options[name]
        elif getattr(node, "commands", None) and token in node.commands:
            node = node.commands[token]
            path.append(token)
            options = _options(node)
        elif getattr(node, "commands", None) and not getattr(node, "invoke_without_command", False):
            return f"{' '.join(path)} has no command {token!r}"
    return None


def _options(command: object) -> dict[str, int]:
    """Option name -> how many values follow it (0 for a flag)."""
    found = {"--help": 0}
    for param in command.params:  # type: ignore[attr-defined]
        takes = 0 if getattr(param, "is_flag", False) or getattr(param, "count", False) else param.nargs
        found |= {name: takes for name in (*param.opts, *getattr(param, "secondary_opts", ())) if name.startswith("-")}
    return found


def test_the_pages_show_commands() -> None:
    shown = {page.relative_to(ROOT).as_posix(): shown_commands(page.read_text(encoding="utf-8")) for page in PAGES}
    assert sum(len(commands) for commands in shown.values()) > 150
    assert len(shown["docs/scale-out.md"]) > 15


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_command_a_page_shows_exists(page: Path) -> None:
    problems = [f"{command}: {problem}" for command in shown_commands(page.read_text(encoding="utf-8"))
                if (problem := command_problem(command))]
    assert problems == []


@pytest.mark.parametrize(("text", "problems"), [
    ("```bash\ngymforge run keychain --profile tiny   # a comment --nope\n```\n", []),
    ("```bash\ngymforge train sft --data a \\\n    --bse b\n```\n", ["gymforge train sft has no option --bse"]),
    ("```bash\ngymforge ui --detach && gymforge artifact ls\n```\n", ["gymforge has no command 'artifact'"]),
    ("```bash\ngymforge serve --model tiny &   # openai:http://h:1/v1#m\n```\n", []),
    ("```bash\ngymforge --dask-address tcp://s:1 run keychain --force\n```\n", []),  # an option's value
    ("```bash\ngymforge filter qa --window 1 6 --plot p.png --k 4\n```\n", []),  # two values
    ("Use `gymforge artifacts ls [--stage S] [--kynd model]` to list.", ["gymforge artifacts ls has no option --kynd"]),
    ("```sh\nmake demo\nmake tests\n```\n", ["no make target 'tests'"]),
    ("```python\ngymforge --nope\n```\n", []),  # not a shell block
])
def test_the_command_check_catches_a_planted_mistake(text: str, problems: list[str]) -> None:
    assert [problem for command in shown_commands(text) if (problem := command_problem(command))] == problems
