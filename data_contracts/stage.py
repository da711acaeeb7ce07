"""The Stage: the unit of the data DAG.

A stage is a pure function over typed inputs. It declares its name, version, the stages it reads, a pydantic
params model and one contract per output, next to its code. It imports neither Prefect nor Dask: one generic
runner (``flows/``) derives the artifact key, runs it, gates every output and publishes or quarantines.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import polars as pl
from pydantic import BaseModel, ConfigDict

Severity = Literal["critical", "warning"]

REJECTED = "rejected"
"""Name of the optional output holding rows a stage dropped on purpose, each with a ``reason`` column."""


class StageError(ValueError):
    """A stage was declared or invoked wrongly; the message says what to fix."""


class Params(BaseModel):
    """Base of every stage's params model: unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def local_inputs(self) -> list[str]:
        """Local files and directories the stage reads beside its input artifacts (seed files, corpora, specs,
        tokenizer and model directories): their content enters the artifact key (data_contracts/content.py)."""
        return []


# The Great Expectations 1.x expectations contracts may use: kind -> (required arguments, optional arguments).
# An Expect is checked against this table where it is declared, so a misspelt kind or argument fails at import
# rather than after a stage has run; the gate builds the GX objects (importing GX costs seconds and 300 MB, too much
# for every process that only declares stages), and tests/data_contracts/test_gate.py checks the table against GX itself.
_MOSTLY = frozenset({"mostly"})
EXPECTATIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ExpectColumnValuesToNotBeNull": (frozenset({"column"}), _MOSTLY),
    "ExpectColumnValuesToBeUnique": (frozenset({"column"}), _MOSTLY),
    "ExpectColumnValuesToBeBetween": (frozenset({"column"}),
                                      frozenset({"min_value", "max_value", "strict_min", "strict_max", "mostly"})),
    "ExpectColumnValuesToBeInSet": (frozenset({"column", "value_set"}), _MOSTLY),
    "ExpectColumnValuesToMatchRegex": (frozenset({"column", "regex"}), _MOSTLY),
    "ExpectColumnValueLengthsToBeBetween": (frozenset({"column"}), frozenset({"min_value", "max_value", "mostly"})),
    "ExpectColumnValuesToBeJsonParseable": (frozenset({"column"}), _MOSTLY),
    "ExpectColumnPairValuesAToBeGreaterThanB": (frozenset({"column_A", "column_B"}), frozenset({"or_equal", "mostly"})),
    "ExpectCompoundColumnsToBeUnique": (frozenset({"column_list"}), frozenset()),
    "ExpectTableRowCountToEqual": (frozenset({"value"}), frozenset()),
    "ExpectTableRowCountToBeBetween": (frozenset(), frozenset({"min_value", "max_value"})),
}


@dataclass(frozen=True)
class Expect:
    """One Great Expectations 1.x expectation, named by its class (``"ExpectColumnValuesToNotBeNull"``); its kind
    and arguments are checked here against ``EXPECTATIONS``, the GX object is built by the gate."""

    kind: str
    severity: Severity = "critical"
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, kind: str, severity: Severity = "critical", **kwargs: Any) -> None:
        if kind not in EXPECTATIONS:
            raise StageError(f"unknown Great Expectations expectation kind {kind!r}; contracts use: "
                             f"{', '.join(sorted(EXPECTATIONS))}")
        required, optional = EXPECTATIONS[kind]
        unknown, missing = sorted(set(kwargs) - required - optional - {"meta"}), sorted(required - set(kwargs))
        if unknown or missing:
            raise StageError(f"{kind}: " + "; ".join(
                [*([f"unknown argument(s) {unknown}"] if unknown else []),
                 *([f"missing argument(s) {missing}"] if missing else [])])
                + f" (takes {sorted(required | optional)})")
        if severity not in ("critical", "warning"):
            raise StageError(f"{kind}: severity {severity!r}; use 'critical' or 'warning'")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "severity", severity)
        object.__setattr__(self, "kwargs", kwargs)


@dataclass(frozen=True)
class Check:
    """A Python check for what GX cannot say (a chain resolves, a golden trajectory replays).

    ``fn`` returns a boolean Series (or list of bools), one per row, True where the row FAILS.
    """

    name: str
    fn: Callable[[pl.DataFrame], pl.Series | list[bool]]
    severity: Severity = "critical"
    description: str = ""


@dataclass(frozen=True)
class Contract:
    """What an output must satisfy: columns with polars dtypes, GX expectations, Python checks. A contract built
    from a record (``data_contracts.schemas``) names it, and then the output holds exactly the record's columns."""

    columns: Mapping[str, type[pl.DataType] | pl.DataType] = field(default_factory=dict)
    expectations: tuple[Expect, ...] = ()
    checks: tuple[Check, ...] = ()
    min_rows: int = 0
    record: str | None = None


REJECTED_CONTRACT = Contract(columns={"reason": pl.String})

Resources = Literal["cpu", "gpu"]
"""What a stage needs: ``cpu`` stages run on the Dask cluster of ``data_refresh``; ``gpu`` stages (training,
evaluation with large models) run in their own flow on the ``gpu`` work pool, never inside a Dask worker."""

ArtifactKind = Literal["data", "model", "index"]
"""What a stage publishes: ``data`` is Parquet outputs only; ``model`` (a checkpoint) and ``index`` (a search index)
are directory artifacts: a directory the stage writes, published with the same atomic rename, manifest and catalog
row, plus any Parquet outputs (metrics, a loss curve)."""


@dataclass(frozen=True)
class DirectoryCheck:
    """A Python check of a directory output: ``fn(path)`` returns what is wrong, or None when it passes."""

    name: str
    fn: Callable[[Path], str | None]
    description: str = ""


@dataclass(frozen=True)
class DirectoryContract:
    """The directory output of a ``model`` or ``index`` stage: its name inside the artifact and its checks."""

    name: str
    checks: tuple[DirectoryCheck, ...] = ()


class Artifact(Protocol):
    """A published artifact as a stage sees its inputs."""

    key: str
    path: Path
    manifest: Mapping[str, Any]

    @property
    def directory(self) -> Path:
        """The directory output of a model or index artifact."""
        ...

    @property
    def outputs(self) -> list[str]:
        """The names of its Parquet outputs."""
        ...

    def read(self, output: str) -> pl.DataFrame: ...

    def scan(self, output: str) -> pl.LazyFrame: ...


RunFn = Callable[..., dict[str, pl.DataFrame]]
"""``run(inputs, params, partition)``, and for a directory artifact ``run(inputs, params, partition, out_dir)``
writing its directory into ``out_dir``; returns the Parquet outputs by name."""

FigureFn = Callable[[Artifact, Path], None]
"""``figure(artifact, path)``: draw a published artifact of the stage as a PNG at ``path`` (flows/figures.py writes
it under ``<data>/figures`` and shows it in the Prefect UI after each run)."""


@dataclass(frozen=True)
class Stage:
    name: str
    version: str
    inputs: tuple[str, ...]
    params: type[Params]
    outputs: Mapping[str, Contract]
    run: RunFn
    description: str = ""
    resources: Resources = "cpu"
    kind: ArtifactKind = "data"
    directory: DirectoryContract | None = None
    optional_inputs: Mapping[str, str] = field(default_factory=dict)
    """Input -> the boolean param that asks for it: read, and part of the key, only when that param is set."""
    figure: FigureFn | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise StageError(f"stage name {self.name!r} must be a Python identifier")
        if not issubclass(self.params, Params):
            raise StageError(f"stage {self.name!r}: params must subclass data_contracts.stage.Params")
        if not self.outputs and self.directory is None:
            raise StageError(f"stage {self.name!r} declares no outputs; declare at least one with its Contract")
        if self.name in self.inputs:
            raise StageError(f"stage {self.name!r} lists itself as an input")
        if self.resources not in ("cpu", "gpu"):
            raise StageError(f"stage {self.name!r}: resources {self.resources!r}; declare 'cpu' or 'gpu'")
        if (self.kind == "data") != (self.directory is None):
            raise StageError(f"stage {self.name!r} of kind {self.kind!r}: a 'model' or 'index' stage declares its "
                             "directory=DirectoryContract(...), a 'data' stage none")
        for input_name, param in self.optional_inputs.items():
            if input_name not in self.inputs:
                raise StageError(f"stage {self.name!r}: optional input {input_name!r} is not one of its inputs "
                                 f"{list(self.inputs)}; add it to inputs=")
            if param not in self.params.model_fields or self.params.model_fields[param].annotation is not bool:
                raise StageError(f"stage {self.name!r}: optional input {input_name!r} is asked for by {param!r}, "
                                 f"which is not a bool field of {self.params.__name__}")

    def unread(self, params: Params) -> frozenset[str]:
        """The optional inputs these params do not ask for: not read, and not in the artifact key or lineage."""
        return frozenset(name for name, param in self.optional_inputs.items() if not getattr(params, param))

    def reads(self, params: Params) -> tuple[str, ...]:
        """The inputs these params read."""
        unread = self.unread(params)
        return tuple(name for name in self.inputs if name not in unread)

    def read_keys(self, params: Params, input_keys: Mapping[str, str]) -> dict[str, str]:
        """The input keys of the inputs these params read, sorted: what the artifact key and the lineage hold."""
        unread = self.unread(params)
        return {name: input_keys[name] for name in sorted(input_keys) if name not in unread}

    def with_inputs(self, names: Sequence[str]) -> Stage:
        """This stage reading the named input stages (a training run's inputs are chosen per run: the data
        artifacts and the base model the user names); the artifact key follows the inputs' names and keys."""
        return dataclasses.replace(self, inputs=tuple(sorted(names)))

    def parse_params(self, raw: Mapping[str, Any] | None) -> Params:
        """Validate raw params; the error is one line naming the stage, each field, its bad value and what is
        allowed (a misspelt field gets the closest names)."""
        from pydantic import ValidationError

        try:
            return self.params.model_validate(dict(raw or {}))
        except ValidationError as exc:
            raise StageError(params_problem(self.name, self.params, exc)) from None


def params_problem(stage_name: str, model: type[BaseModel], error: Any) -> str:
    """One line for a pydantic ``ValidationError`` of a stage's params: ``sft: lerning_rate is not a field (did you
    mean learning_rate?); max_steps=0: ...``. The fields are listed only on request (``gymforge params STAGE``)."""
    import difflib

    problems = []
    for err in error.errors():
        loc = [str(part) for part in err["loc"]]
        where = ".".join(loc)
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = list(_fields_at(model, loc[:-1]))
            close = difflib.get_close_matches(loc[-1], known, n=2, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else f"`gymforge params {stage_name}` lists them"
            problems.append(f"{where} is not a field ({hint})")
        elif not loc:  # a check across fields: its message names them
            problems.append(message)
        else:
            problems.append(f"{where}={err['input']!r}: {message}")
    return f"{stage_name}: " + "; ".join(problems)


def _fields_at(model: type[BaseModel], path: Sequence[str]) -> dict[str, Any]:
    """The fields of the params model nested at ``path`` (``sampling`` -> the sampling settings' fields)."""
    for name in path:
        annotation = model.model_fields[name].annotation if name in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return {}
        model = annotation
    return dict(model.model_fields)


STAGES: dict[str, Stage] = {}


def stage(
    *,
    name: str,
    version: str,
    params: type[Params],
    outputs: Mapping[str, Contract],
    inputs: tuple[str, ...] = (),
    resources: Resources = "cpu",
    kind: ArtifactKind = "data",
    directory: DirectoryContract | None = None,
    optional_inputs: Mapping[str, str] | None = None,
    figure: FigureFn | None = None,
) -> Callable[[RunFn], Stage]:
    """Declare and register a stage: ``@stage(name=..., ...) def run(inputs, params, partition) -> {...}``.
    ``optional_inputs={"domain_graphs": "domain_text"}``: that input is read only when the param is set;
    ``figure=draw``: ``draw(artifact, path)`` pictures each published artifact."""

    def register(fn: RunFn) -> Stage:
        if name in STAGES:
            raise StageError(f"stage {name!r} is declared twice ({STAGES[name].run.__module__} and {fn.__module__})")
        declared = Stage(name, version, inputs, params, dict(outputs), fn, (fn.__doc__ or "").strip(), resources,
                         kind, directory, dict(optional_inputs or {}), figure)
        STAGES[name] = declared
        return declared

    return register


def get_stage(name: str) -> Stage:
    try:
        return STAGES[name]
    except KeyError:
        known = ", ".join(sorted(STAGES)) or "(none registered)"
        raise StageError(f"unknown stage {name!r}; known stages: {known}") from None


def seed_for(seed: int, stage_name: str, partition: str, index: int) -> int:
    """The per-item seed of DESIGN.md section 3, for ``random.Random``, Faker or numpy: independent of iteration
    order and of worker count."""
    digest = hashlib.blake2b(f"{seed}/{stage_name}/{partition}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def rng_for(seed: int, stage_name: str, partition: str, index: int) -> random.Random:
    return random.Random(seed_for(seed, stage_name, partition, index))


@dataclass(frozen=True)
class FrameArtifact:
    """An artifact held in memory (with a directory output on disk, for a model or index), for notebooks and tests
    that call a stage's ``run`` directly."""

    frames: Mapping[str, pl.DataFrame]
    key: str = "in-memory"
    manifest: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None
    directory: Path | None = None

    @property
    def outputs(self) -> list[str]:
        return list(self.frames)

    def read(self, output: str) -> pl.DataFrame:
        return self.frames[output]

    def scan(self, output: str) -> pl.LazyFrame:
        return self.frames[output].lazy()
