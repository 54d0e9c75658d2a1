"""Reference interpreters: machine runs (with traces), batched runs, bit-parallel circuit eval."""

from tm2nn.interp.batch import run_batch
from tm2nn.interp.circuit import (
    eval_circuit,
    eval_gate_by_gate,
    eval_words,
    exhaustive_inputs,
    pack_bits,
    random_inputs,
    truth_table,
    unpack_bits,
)
from tm2nn.interp.machine import DEFAULT_MAX_STEPS, RunResult, Trace, configurations, run_machine

__all__ = [
    "run_machine", "run_batch", "configurations", "RunResult", "Trace", "DEFAULT_MAX_STEPS",
    "eval_circuit", "eval_words", "eval_gate_by_gate", "exhaustive_inputs", "random_inputs",
    "truth_table", "pack_bits", "unpack_bits",
]
