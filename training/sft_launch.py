"""One process of a multi-process SFT run: ``accelerate launch -m training.sft_launch SPEC.json`` (started by the
``sft`` stage when ``num_processes`` > 1). Every process trains its shard of each batch; process 0 writes the trained
model (an adapter merged into it and kept under ``adapter/``) and the trainer's log history to ``<output_dir>/final``
for the stage to publish."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(spec_path: str) -> None:
    from accelerate import PartialState

    from training.adapters import ADAPTER, merge_adapter
    from training.sft import SFTParams, fit, load_base
    from training.sft_eval import CallTurn

    spec = json.loads(Path(spec_path).read_text())
    params = SFTParams.model_validate(spec["params"])
    model, tokenizer, _ = load_base(Path(spec["base_dir"]), params.chat_template)
    turns = [CallTurn(tuple(t["messages"]), tuple(t["tools"]), t["name"], t["arguments"], t["trajectory"])
             for t in spec["eval_turns"]]
    output_dir = Path(spec["output_dir"])
    resume_from = Path(spec["resume_from"]) if spec["resume_from"] else None
    model, history = fit(model, tokenizer, spec["train_rows"], spec["eval_rows"], turns, params, output_dir,
                         resume_from, progress=False)
    if PartialState().is_main_process:
        final = output_dir / "final"
        merge_adapter(model, final / ADAPTER).save_pretrained(str(final))
        (final / "log_history.json").write_text(json.dumps(history))


if __name__ == "__main__":
    main(sys.argv[1])
