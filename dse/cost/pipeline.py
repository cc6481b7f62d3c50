"""Pipeline parallelism: 1F1B and interleaved schedules.

Narayanan et al. 2021 (arXiv 2104.04473) §2.2: with p stages, m micro-batches and v model chunks per
device, the bubble is (p−1)·(t_f + t_b)/v, i.e. a fraction (p−1)/(v·m) of the ideal time; 1F1B keeps at
most p micro-batches in flight on the first stage; the interleaved schedule needs m to be a multiple of p.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.cost.select import mask, pick

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)


def pipeline_time(microbatches: Array, pp: Array, vpp: Array, t_mb_slowest: Array, t_mb_mean: Array) -> Array:
    """Time of the forward/backward part of one step.

    t = m · t_slowest + (p − 1)/v · t_mean

    The steady state is paced by the slowest stage (stages with the embedding or the logits do more work);
    the fill and drain add (p−1)/v micro-batch times of an average stage (Narayanan 2021 §2.2.2).  With
    p = 1 this is m · t.
    """
    return microbatches * t_mb_slowest + pipeline_bubble_time(pp, vpp, t_mb_mean)


def pipeline_bubble_time(pp: Array, vpp: Array, t_mb_mean: Array) -> Array:
    """Bubble: (p − 1)/v micro-batch times (Narayanan 2021 §2.2.2, t_pb^int = (p−1)·(t_f+t_b)/v)."""
    return (pp - 1.0) / vpp * t_mb_mean


def inflight_layer_microbatches(microbatches: Array, pp: Array, vpp: Array, layers: Array) -> Array:
    """Layer·micro-batch activations the first stage holds at its peak.

    1F1B (v = 1): min(p, m) micro-batches of its L/p layers (Narayanan 2021 §2.2.1: "at most the number of
    pipeline stages").  Interleaved (v > 1): Megatron-LM warms up 2(p−1) + (v−1)·p chunk-micro-batches
    before the first backward on rank 0, so 2(p−1) + (v−1)·p + 1 chunks of L/(p·v) layers are alive, i.e.
    L·(1 + (p−1)/(p·v)) layers' worth — Korthikanti 2022 §4.2.3's factor (1 + (p−1)/(p·v)) —
    at most all m·v chunks.
    """
    one_f_one_b = np.minimum(pp, microbatches) * layers / pp
    chunks = np.minimum(2.0 * (pp - 1.0) + (vpp - 1.0) * pp + 1.0, microbatches * vpp)
    interleaved = chunks * layers / (pp * vpp)
    return pick(mask(vpp > 1, vpp), interleaved, one_f_one_b)


def inflight_layer_microbatches_last_stage(microbatches: Array, pp: Array, vpp: Array, layers: Array) -> Array:
    """Layer·micro-batch activations the last stage holds: one micro-batch of its L/p layers (1F1B); with
    interleaving Megatron-LM warms up (v−1)·p chunks on the last rank, so (v−1)·p + 1 chunks are alive."""
    chunks = np.minimum((vpp - 1.0) * pp + 1.0, microbatches * vpp)
    return pick(mask(vpp > 1, vpp), chunks * layers / (pp * vpp), layers / pp)


def stage_layers_split(layers: Array, pp: Array, vpp: Array, split: Array, first_in: Array, last_in: Array,
                       mtp: Array = 0.0) -> tuple[Array, Array, Array]:
    """Transformer layers on the first, a middle and the last pipeline rank.

    * even: L/p each;
    * embedding_loss (Megatron-core ``account_for_embedding_in_pipeline_split`` and ``..._loss_...``): the
      embedding and the loss count as one layer each, L + 2 slots over p·v virtual stages; the first and the
      last virtual stage give one slot to them, so the first and last ranks hold (L + 2)/p − 1 layers; the
      multi-token-prediction modules (``mtp``) take a slot each on the last virtual stage, as Megatron-core's
      pipeline layout places them ('m' before the loss 'L': DeepSeek-V3's ``Et|(tt|)*30mL``), so
      L + 2 + mtp slots, and the last rank holds (L + 2 + mtp)/p − 1 − mtp;
    * explicit first / last (Megatron ``num_layers_in_first/last_pipeline_stage``, NaN when not given): the
      rest, L − first − last, over the p − 2 middle ranks, the fullest of them holding ⌈rest / (p − 2)⌉, which
      paces the pipeline and sets its memory.  Megatron-core asserts that the rest divides evenly; NeMo
      Automodel's pipeline split (``generate_hf_model_fqn_per_model_part``: one layer more on the first
      L mod stages virtual stages) and torchtitan's run uneven ones, e.g. 61 layers on 8 ranks as
      8, 8, 8, 8, 8, 7, 7, 7.

    With p = 1 the one rank holds all L.  Whether the counts divide is checked in the reasons.

    When no row asks for an uneven split (the usual sweep), the even split is returned without the selects:
    first = last = L/p and middle = L/p (p > 2), 0 (p = 2) or L (p = 1), the values the general formula
    gives for those rows, since (L − 2L/p)/(p − 2) = L/p exactly wherever L/p is an integer (the rows the
    reasons keep; the others are not reported)."""
    even = layers / pp
    if np.ndim(split) and not (split == 1).any() and np.isnan(first_in).all() and np.isnan(last_in).all():
        return even, even * (pp != 2), even
    emb = (split == 1).astype(layers.dtype)
    split_edge = pick(emb, (layers + 2.0 + mtp) / pp - 1.0, even)
    first_asked: Array = np.where(np.isnan(first_in), split_edge, first_in)
    last_asked: Array = np.where(np.isnan(last_in), split_edge - emb * mtp, last_in)
    middle: Array = np.ceil((layers - first_asked - last_asked) / np.maximum(pp - 2.0, 1.0))
    middle = np.where(pp > 2, middle, np.where(pp > 1, 0.0, layers))
    return np.where(pp > 1, first_asked, layers), middle, np.where(pp > 1, last_asked, layers)


def inflight_chunk_microbatches(microbatches: Array, pp: Array, vpp: Array, rank: Array) -> Array:
    """Chunk·micro-batches pipeline rank ``rank`` holds at its peak: 1F1B min(p − r, m); interleaved
    (Megatron-LM warm-up) min(2(p − 1 − r) + (v − 1)·p + 1, m·v) chunks.  Rank 0 and rank p − 1 are
    :func:`inflight_layer_microbatches` and :func:`inflight_layer_microbatches_last_stage` per layer."""
    one_f_one_b = np.minimum(pp - rank, microbatches)
    chunks = np.minimum(2.0 * (pp - 1.0 - rank) + (vpp - 1.0) * pp + 1.0, microbatches * vpp)
    return pick(mask(vpp > 1, vpp), chunks / vpp, one_f_one_b)
