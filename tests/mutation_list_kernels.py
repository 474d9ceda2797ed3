"""The mutation check's entries for weight-only quantized kernels by rows: the per-row
dequantization term, a device part's fitted work and bandwidth factor reaching the roofline
(:mod:`specsim.calibrate.kernels`); run by ``tests/mutations.py`` with the others. Not
collected by pytest; importing it runs nothing.
"""

from __future__ import annotations

from mutation_list import Mutation  # beside this script: on the path

ROOF = "specsim/cost/roofline.py"
TESTS = ("tests/calibrate/test_kernels.py",)
AIC = ("tests/calibrate/test_aiconfigurator.py",)

KERNELS: tuple[Mutation, ...] = (
    Mutation(
        "dequant-per-row",
        ROOF,
        "roof = roof + co.dequant_s * dequant_rows(rows, co.dequant_tile)",
        "roof = roof + co.dequant_s * dequant_rows(1.0 + 0.0 * rows, co.dequant_tile)",
        "quantized kernels: dequantization charged per row of the pass (once instead)",
        TESTS,
    ),
    Mutation(
        "dequant-part-override",
        ROOF,
        "ops = rt.dequant_ops(formats.weight_format, formats.dequant_ops)"
        " if formats.quantized else 0.0",
        "ops = formats.dequant_ops if formats.quantized else 0.0",
        "quantized kernels: a device part's fitted dequantization work (format_dequant_ops)",
        TESTS,
    ),
    Mutation(
        "format-memory-factor",
        "specsim/cards/runtime.py",
        "scale(tables[1], self.memory_efficiency, factor, 1.0)",
        "scale(tables[1], self.memory_efficiency, 1.0, 1.0)",
        "quantized kernels: the format's factor on the weight reads' bandwidth fraction",
        TESTS,
    ),
    Mutation(
        "allreduce-part",
        ROOF,
        "ar = allreduce_card(hw, rt.allreduce_latency_s, rt.allreduce_bandwidth)",
        "ar = hw",
        "operation tables: a stack's device part's fitted all-reduce latency and bandwidth",
        AIC,
    ),
    Mutation(
        "stack-device-part",
        "specsim/cards/stack_files.py",
        "part = device_part_for(hw, stack.slug)",
        "part = device_part_for(hw)",
        "operation tables: a device part named for a stack is that stack's on its cards",
        AIC,
    ),
)
