"""Net vs interpreter: exhaustive or random inputs, torch and onnxruntime, first divergence."""

from tm2nn.verify.check import Mismatch, VerifyReport, verify_compiled

__all__ = ["verify_compiled", "VerifyReport", "Mismatch"]
