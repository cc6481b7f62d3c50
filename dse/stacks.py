"""The software stack of a measurement or a sweep: the ``stack`` column of case files and tables.

A stack names the software that ran (project and release).  This module holds the vocabulary; an empty
``stack`` means the current Megatron-core / NeMo defaults of the model.  Any other value must be one of
:data:`STACKS`, else the input is refused with the list of known stacks.
"""

from __future__ import annotations

#: Known stacks and what each names.
STACKS: dict[str, str] = {
    "megatron-lm-2021": "Megatron-LM as used in Narayanan et al. 2021 (PTD-P, SC'21 scripts)",
    "megatron-lm-2022": "Megatron-LM as used in Korthikanti et al. 2022 (sequence parallelism, selective "
                        "recomputation)",
    "deepspeed-zero3-2021": "DeepSpeed ZeRO-3 as measured in Narayanan et al. 2021",
    "nemo-24.03": "NVIDIA NeMo container 24.03",
    "nemo-24.07": "NVIDIA NeMo container 24.07",
    "nemo-25.09": "NVIDIA NeMo / Megatron-Bridge container 25.09",
    "nemo-25.11": "NVIDIA NeMo / Megatron-Bridge container 25.11",
    "nemo-26.02": "NVIDIA NeMo / Megatron-Bridge container 26.02",
    "nemo-inference-2023": "NeMo framework inference of Llama-2 (2023 documentation)",
    "tensorrt-llm-0.9.0": "TensorRT-LLM 0.9.0 (perf-overview document)",
    "tensorrt-llm-0.10.0": "TensorRT-LLM 0.10.0 (perf-overview document)",
    "tensorrt-llm-1.0": "TensorRT-LLM 1.0 (perf-overview document)",
}


def stack_names() -> tuple[str, ...]:
    return tuple(STACKS)
