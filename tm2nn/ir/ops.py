"""The gate types of a circuit (ARCHITECTURE.md, "IR conventions": any fan-in)."""

OPS = ("AND", "OR", "NOT", "XOR", "NAND", "NOR", "XNOR", "BUF", "CONST0", "CONST1")
