"""Net vs interpreter: exhaustive or random inputs within a time budget, torch and
onnxruntime, first divergence.  The backend says what to compare (its checker)."""

from tm2nn.verify.check import (
    DEFAULT_BUDGET,
    Checker,
    InputSpace,
    Mismatch,
    VerifyReport,
    verify_compiled,
)

__all__ = ["verify_compiled", "VerifyReport", "Mismatch", "Checker", "InputSpace", "DEFAULT_BUDGET"]
