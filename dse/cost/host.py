"""The host side of a training step: ZeRO-Offload / ZeRO-Infinity (Ren et al. 2021, arXiv 2101.06840;
Rajbhandari et al. 2021, arXiv 2104.07857) as DeepSpeed runs them.

* ``offload: optimizer`` (ZeRO-Offload): each rank's optimizer partition (fp32 master weights, Adam momentum and
  variance) lives in host memory and is updated there by DeepSpeed's CPU Adam; after the backward's reduction the
  rank copies its gradient partition to the host and, after the step, the updated 16-bit partition back;
* ``offload: all`` (ZeRO-Infinity to CPU memory): the 16-bit weights' partitions live in host memory too and are
  read for every forward and backward, then all-gathered over the GPUs as ZeRO-3 does.

The rates are the hardware columns of :func:`dse.hardware.catalog.achieved`: ``host_bw`` (a GPU's share of its
host link while every GPU copies), ``cpu_adam_rate`` (parameters/s of one rank's CPU Adam on its share of the
host's cores and DRAM) and ``host_mem_bytes`` (a GPU's share of the host memory).
"""

from __future__ import annotations

from typing import Any

Array = Any  # numpy arrays or scalars that broadcast

#: DeepSpeed ZeRO-1/2 offload converts each gradient partition to fp32 on the GPU before the copy:
#: ``src_tensor = src_tensor.float()`` then ``dest_tensor.copy_(src_tensor, non_blocking=True)``
#: (deepspeed/runtime/zero/stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu, v0.9-0.12).
OFFLOAD_GRADIENT_BYTES = 4.0
#: The updated partition comes back as 16-bit weights (``bit16_partitions[...].data.copy_(fp32_partition.data)``,
#: converted on the host side of the copy).
OFFLOAD_PARAMETER_BYTES = 2.0
#: Host memory per offloaded parameter: fp32 master weight, Adam momentum and variance (12, ZeRO's K) and the
#: fp32 gradient partition DeepSpeed keeps pinned beside them (4).
HOST_OPTIMIZER_STATE_BYTES = 16.0


def offload_gradient_bytes(params: Array) -> Array:
    """Bytes one rank copies to the host per step: its gradient partition in fp32 (OFFLOAD_GRADIENT_BYTES)."""
    return OFFLOAD_GRADIENT_BYTES * params


def offload_parameter_bytes(params: Array) -> Array:
    """Bytes one rank copies back per step: its updated partition in 16 bits."""
    return OFFLOAD_PARAMETER_BYTES * params


def cpu_adam_time(params: Array, rate: Array) -> Array:
    """Seconds of one rank's CPU Adam over its ``params`` at ``rate`` parameters/s (every rank of the node runs
    its own at once, each on its share of the host: :func:`dse.hardware.catalog.cpu_adam_rate`)."""
    return params / rate


def host_state_bytes(offloaded_params: Array, offloaded_weight_bytes: Array) -> Array:
    """Host memory one GPU's rank holds: HOST_OPTIMIZER_STATE_BYTES per offloaded optimizer parameter, plus the
    16-bit weights it keeps there with ``offload: all``.  A run needs it within its share of the host's memory
    (reason ``host_memory_exceeded`` otherwise)."""
    return HOST_OPTIMIZER_STATE_BYTES * offloaded_params + offloaded_weight_bytes
