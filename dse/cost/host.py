"""The host side of a training step: ZeRO-Offload / ZeRO-Infinity (Ren et al. 2021, arXiv 2101.06840;
Rajbhandari et al. 2021, arXiv 2104.07857) as DeepSpeed runs them.

* ``offload: optimizer`` (ZeRO-Offload): each rank's optimizer partition (fp32 master weights, Adam momentum and
  variance) lives in host memory and is updated there by DeepSpeed's CPU Adam; after the backward's reduction the
  rank copies its gradient partition to the host (ZeRO-3: there, back and there again) and, after the step, the
  updated 16-bit partition back, every copy through pageable memory (OFFLOAD_PAGEABLE_SLOWDOWN);
* ``offload: all`` (ZeRO-Infinity to CPU memory): the 16-bit weights' partitions live in pinned host memory too
  (the step writes them there) and are read for every forward and backward, then all-gathered over the GPUs as
  ZeRO-3 does.

The rates are the hardware columns of :func:`dse.hardware.catalog.achieved`: ``host_bw`` (a GPU's share of its
host link while every GPU copies), ``cpu_adam_rate`` (parameters/s of one rank's CPU Adam on its share of the
host's cores and DRAM) and ``host_mem_bytes`` (a GPU's share of the host memory).
"""

from __future__ import annotations

from typing import Any

Array = Any  # numpy arrays or scalars that broadcast

#: DeepSpeed 0.9-0.12.6 (microsoft/DeepSpeed v0.12.0 = 09834bbe) keeps the host buffers of the optimizer partition
#: pageable: ``offload_optimizer.pin_memory`` and ``offload_param.pin_memory`` default to False
#: (deepspeed/runtime/zero/offload_config.py).  Every copy between them and the GPU is therefore staged by the CUDA
#: driver through its own pinned buffer, and where the dtypes differ PyTorch converts on the host side first.  One
#: such copy of a rank's partition costs OFFLOAD_PAGEABLE_SLOWDOWN times the pinned copy of its fp32 values
#: (OFFLOAD_COPY_BYTES per parameter at the link rate ``host_bw``).
OFFLOAD_COPY_BYTES = 4.0
#: Measured on the step's copy back (ZeRO-1/2: ``bit16_partitions[partition_id].data.copy_(fp32_partition.data)``,
#: fp32 pageable host values converted to 16 bits on the host, then copied pageable): pinning the fp32 partition
#: and converting on the GPU instead "Speedup h2d memcpy by 6x on single GPU and 4-5x on 8GPU node"
#: (microsoft/DeepSpeed PR 5301, commit 7b5b0660, first in v0.14.1); the middle of 4-5.  The backward's
#: device-to-host gradient copies into the same pageable buffers are the mirror case, "the bottleneck during the
#: final backward pass" of ZeRO-3 offload until PR 6670 (commit 90180a9e, v0.16) pinned them the same way;
#: ASSUMPTION: each costs the same factor (no timing of them was published), whether or not it converts.
OFFLOAD_PAGEABLE_SLOWDOWN = 4.5
#: Host memory per offloaded parameter: fp32 master weight, Adam momentum and variance (12, ZeRO's K) and the
#: fp32 gradient partition DeepSpeed keeps beside them (4).  ZeRO-3 keeps a further host copy of the 16-bit
#: gradient partition (stage3.py grad_partitions_flat_buffer, on the optimizer's device in the model's dtype:
#: engine.get_data_types gives bf16 with ZeRO), 2 more bytes not counted here: with them Llama-2 7B's ZeRO-3 offload
#: would need 135 GB on the 128 GB RTX 3090 host, where Zhang et al. ran it.
HOST_OPTIMIZER_STATE_BYTES = 16.0
#: Pageable copies of each gradient partition per step.  ZeRO-1/2 (stage_1_and_2.py
#: async_inplace_copy_grad_to_fp32_buffer_from_gpu): ``src_tensor.float()`` on the GPU, then one copy to the fp32
#: host buffer.  ZeRO-3 (stage3.py partition_grads): ``grad_buffer.copy_(grad_partition, non_blocking=True)`` into
#: the host flat buffer, ``grad_buffer.to(grad_partition.device, non_blocking=True)`` back to the GPU "to speed up
#: the next few operations" (the norm), then ``fp32_grad_tensor.copy_(grad_buffer)`` to the fp32 host buffer,
#: converting on the host: three.
OFFLOAD_GRADIENT_COPIES_ZERO12 = 1.0
OFFLOAD_GRADIENT_COPIES_ZERO3 = 3.0


def offload_gradient_bytes(params: Array, zero3: Array) -> Array:
    """Pinned-equivalent bytes one rank's gradient partition costs per step on its way to the host: per pageable
    copy (OFFLOAD_GRADIENT_COPIES_ZERO12, or _ZERO3 where ``zero3`` is 1) OFFLOAD_PAGEABLE_SLOWDOWN times its fp32
    bytes (OFFLOAD_COPY_BYTES)."""
    copies = OFFLOAD_GRADIENT_COPIES_ZERO12 + zero3 * (OFFLOAD_GRADIENT_COPIES_ZERO3 - OFFLOAD_GRADIENT_COPIES_ZERO12)
    return copies * OFFLOAD_PAGEABLE_SLOWDOWN * OFFLOAD_COPY_BYTES * params


def offload_parameter_bytes(params: Array) -> Array:
    """Pinned-equivalent bytes of the step's copy of one rank's updated partition into its 16-bit weights on the
    GPU (ZeRO-1/2 and ZeRO-3 without ``offload_param``): one pageable copy converted on the host."""
    return OFFLOAD_PAGEABLE_SLOWDOWN * OFFLOAD_COPY_BYTES * params


def cpu_adam_time(params: Array, rate: Array) -> Array:
    """Seconds of one rank's CPU Adam over its ``params`` at ``rate`` parameters/s (every rank of the node runs
    its own at once, each on its share of the host: :func:`dse.hardware.catalog.cpu_adam_rate`)."""
    return params / rate


def host_state_bytes(offloaded_params: Array, offloaded_weight_bytes: Array) -> Array:
    """Host memory one GPU's rank holds: HOST_OPTIMIZER_STATE_BYTES per offloaded optimizer parameter, plus the
    16-bit weights it keeps there with ``offload: all``.  A run needs it within its share of the host's memory
    (reason ``host_memory_exceeded`` otherwise)."""
    return HOST_OPTIMIZER_STATE_BYTES * offloaded_params + offloaded_weight_bytes
