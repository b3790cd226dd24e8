# schedules/interleaved_zero_bubble.pp as a job of D identical replicas, each rank reducing each of its stages'
# gradients after its last backward (a test input of tests/test_prove_replicas.py).
# Interleaved zero bubble (ZB1P, Qi et al., 2024), as torch.distributed.pipelining's
# ScheduleInterleavedZeroBubble orders it: interleaved 1F1B's order with one warm-up forward per
# hop instead of two, the backward split into I and W, and rank r's weight gradients lagging r
# backwards behind so that they fill the bubbles.
schedule interleaved_zero_bubble_dp(P = 4, V = 2, M = 8, D = 2) {
  require P >= 1, V >= 1, M >= 1
  let rounds = max(1, M // P)
  let per_round = M // rounds
  require M % rounds == 0 else "zero bubble needs M to be a multiple of the number of rounds max(1, M // P)"
  require D >= 1
  stages V * P
  replicas D
  place loop                      # stage s on rank s % P
  rank r {
    let total = V * M             # forwards (and backwards) on this rank
    let warm = min((V - 1) * per_round + (P - 1 - r), total)
    let fstage(k) = ((k // per_round) % V) * P + r          # chunk of the k-th forward
    let bstage(k) = (V - 1 - (k // per_round) % V) * P + r  # chunk of the k-th backward
    let mb(k) = (k // (per_round * V)) * per_round + k % per_round
    for op in 0 .. total + warm {
      if op < total { F(fstage(op), mb(op)) }
      if op >= warm {
        let k = op - warm
        I(bstage(k), mb(k))
        if k >= r { W(bstage(k - r), mb(k - r)) }
      }
    }
    for k in max(0, total - r) .. total { W(bstage(k), mb(k)) }   # the weight gradients still owed
    for v in 0 .. V { REDUCE_GRAD(v * P + r) }
  }
}
