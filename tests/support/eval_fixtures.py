"""Fixtures of the evaluation tests: prompt items with known answers, an OpenAI-compatible server in front of any
(test-double) engine that can be taken down mid-run, and test-double stages whose lineage makes a model trained on
known ids. Test doubles all, never defaults."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import Field

from data_contracts.stage import Contract, DirectoryContract, Params, stage
from inference.checkpoint import MODEL_DIRECTORY
from inference.engine import Engine, Request, SamplingParams
from inference.evaluation.items import EvalItem


def question(i: int) -> str:
    return f"Question {i}: which city?"


def prompt_item(i: int, **attributes: Any) -> EvalItem:
    return EvalItem(id=f"q{i}", kind="prompt", source="qa", messages=[{"role": "user", "content": question(i)}],
                    reward="two_way", answer=f"city{i}", attributes={"domain": "world", **attributes},
                    known_as=(f"q{i}", f"seed{i}"))


@dataclass
class EngineServer:
    """``/v1/models`` and ``/v1/chat/completions`` answered by ``engine``; while ``down`` every request gets a 503,
    and after ``fail_after`` answered requests it goes down by itself (an outage mid-run)."""

    engine: Engine
    fail_after: int | None = None
    down: bool = False
    answered: int = 0
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if self.fail_after is not None and self.answered >= self.fail_after:
                self.down = True
            if self.down:
                self.refused += 1
                return 503, {"error": "down for maintenance"}
            self.answered += 1
        sampling = SamplingParams(temperature=body.get("temperature", 1.0), top_p=body.get("top_p", 1.0),
                                  max_tokens=body.get("max_tokens", 64), n=body.get("n", 1), seed=body.get("seed"))
        [completions] = self.engine.generate([Request(body["messages"], body.get("tools") or (), sampling)])
        choices = [{"index": i, "finish_reason": c.finish_reason if c.finish_reason != "tool_calls" else "stop",
                    "message": {"role": "assistant", "content": c.text}, "token_ids": list(c.token_ids),
                    "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp}
                                             for t, lp in zip(c.token_ids, c.logprobs, strict=True)]}}
                   for i, c in enumerate(completions)]
        return 200, {"choices": choices, "prompt_token_ids": list(completions[0].prompt_token_ids)}


@contextlib.contextmanager
def serve(server: EngineServer) -> Iterator[str]:
    """Serve on a free loopback port; yields the API base URL (``http://127.0.0.1:PORT/v1``)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {"data": [{"id": "scripted", "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self._send(*server.handle(body))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


# --- a model trained on known ids, for the overlap check ---------------------------------------------------------


class NoParams(Params):
    pass


class TrainsetParams(Params):
    ids: tuple[str, ...] = Field(("q1", "seed2"), description="ids of the training rows")
    eval_ids: tuple[str, ...] = Field(("q3",), description="ids of rows in the eval split (not training data)")


@stage(name="test_double_trainset", version="1", params=TrainsetParams, outputs={"rows": Contract(
    columns={"id": pl.String, "split": pl.String})})
def trainset(inputs, params: TrainsetParams, partition: str) -> dict[str, pl.DataFrame]:
    """Rows named by ``ids`` (train split) and ``eval_ids`` (eval split)."""
    return {"rows": pl.DataFrame({"id": [*params.ids, *params.eval_ids],
                                  "split": ["train"] * len(params.ids) + ["eval"] * len(params.eval_ids)})}


@stage(name="test_double_trained_model", version="1", params=NoParams, inputs=("test_double_trainset",),
       kind="model", directory=DirectoryContract("model"),
       outputs={"summary": Contract(columns={"rows": pl.Int64})})
def trained_model(inputs, params: NoParams, partition: str, out_dir: Path) -> dict[str, pl.DataFrame]:
    """A 'model' directory whose lineage holds the trainset."""
    (out_dir / "weights.txt").write_text("test double")
    return {"summary": pl.DataFrame({"rows": [inputs["test_double_trainset"].read("rows").height]})}


@stage(name="test_double_finetuned", version="1", params=NoParams, inputs=("test_double_trained_model",),
       kind="model", directory=DirectoryContract("model"),
       outputs={"summary": Contract(columns={"rows": pl.Int64})})
def finetuned(inputs, params: NoParams, partition: str, out_dir: Path) -> dict[str, pl.DataFrame]:
    """A second model built from the first (the overlap check walks models back through the lineage)."""
    (out_dir / "weights.txt").write_text("test double, again")
    return {"summary": pl.DataFrame({"rows": [0]})}


@stage(name="test_double_tiny_model", version="1", params=NoParams, inputs=("test_double_trainset",), kind="model",
       directory=MODEL_DIRECTORY, outputs={"summary": Contract(columns={"rows": pl.Int64})})
def tiny_model(inputs, params: NoParams, partition: str, out_dir: Path) -> dict[str, pl.DataFrame]:
    """The tests' tiny checkpoint published as a model artifact whose lineage holds the trainset (not trained on it:
    a test double of a fine-tuned model for the overlap check)."""
    from inference_support import tiny_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference.checkpoint import save_model

    source = tiny_checkpoint()
    save_model(AutoModelForCausalLM.from_pretrained(source), AutoTokenizer.from_pretrained(source), out_dir,
               {"kind": "test double", "trained_on": inputs["test_double_trainset"].key})
    return {"summary": pl.DataFrame({"rows": [inputs["test_double_trainset"].read("rows").height]})}
