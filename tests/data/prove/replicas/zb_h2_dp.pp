# schedules/zb_h2.pp as a job of D identical replicas, each rank reducing each of its stages'
# gradients after its last backward (a test input of tests/test_prove_replicas.py).
# ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): more forwards in flight (peak
# activations 2P-1) so that, with M >= 2P, every rank works without a gap from its first action
# to its last. The order is the paper's heuristic (a free rank runs a ready I, else an F while at
# most 2P-1 activations are live, else a W) at unit costs, written out as loops (the greedy form,
# tests/data/zb_h2_greedy.pp, gives the same order): rank r runs 2P-1-2r forwards, then after each
# I what fits before the next one arrives: the 2r forwards up to 2P-1 live activations, P-1-r rounds
# of a W and an F that bring its I's to 1F1B's lag of P-r, a W and an F per I while forwards remain,
# then W's (one or two per I), and after the last I the W's still owed.
schedule zb_h2_dp(P = 4, M = 8, D = 2) {
  require P >= 1, M >= 1
  require D >= 1
  stages P
  replicas D
  place loop                      # stage s on rank s
  let warm(r) = min(2 * P - 1 - 2 * r, M)                # forwards before the first I
  let pairs(r) = min(2 * r, M - warm(r))                 # forwards after the first I's, up to 2P-1 live
  let rounds(r) = max(0, min(P - 1 - r, M - 2 * P + 1))  # then (W, F) rounds
  rank r {
    for m in 0 .. warm(r) { F(r, m) }
    for m in 0 .. min(2 * P - 2, M) {     # an I every 2 steps (unit costs): 1 action after it
      I(r, m)
      if m < pairs(r) { F(r, warm(r) + m) }
      elif m < pairs(r) + 2 * rounds(r) {
        if m % 2 == 0 { W(r, m // 2 - r) } else { F(r, 2 * P - 1 + m // 2 - r) }
      }
      elif m < M - 1 { W(r, m - pairs(r) - rounds(r)) }
      else { for n in M - 1 - pairs(r) .. M { W(r, n) } }
    }
    for m in 2 * P - 2 .. M {             # an I every 3 steps: 2 actions after it
      I(r, m)
      if m + P - r < M { W(r, m + 1 - P - r); F(r, m + P - r) }
      elif m < M - 1 { W(r, 2 * m - M + 1 - 2 * r); W(r, 2 * m - M + 2 - 2 * r) }
      else { for n in M - 1 - 2 * r .. M { W(r, n) } }
    }
    REDUCE_GRAD(r)
  }
}
