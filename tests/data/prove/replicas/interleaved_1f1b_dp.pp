# Interleaved 1F1B (schedules/interleaved_1f1b.pp) as a data-parallel job of D identical replicas:
# each rank reduces each of its V stages' gradients after its last backward.
schedule interleaved_1f1b_dp(P = 4, V = 2, M = 8, D = 2) {
  require P >= 1, V >= 1, M >= 1, D >= 1
  let rounds = max(1, M // P)
  let per_round = M // rounds
  require M % rounds == 0 else "interleaved 1F1B needs M to be a multiple of the number of rounds max(1, M // P)"
  stages V * P
  replicas D
  place loop
  rank r {
    let total = V * M
    let warm = min((V - 1) * per_round + 2 * (P - 1 - r), total)
    for op in 0 .. total + warm {
      if op < total {
        F(((op // per_round) % V) * P + r, (op // (per_round * V)) * per_round + op % per_round)
      }
      if op >= warm {
        let k = op - warm
        B((V - 1 - (k // per_round) % V) * P + r, (k // (per_round * V)) * per_round + k % per_round)
      }
    }
    for v in 0 .. V { REDUCE_GRAD(v * P + r) }
  }
}
