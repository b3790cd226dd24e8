# ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): 1F1B with the backward split into I
# (input gradient, on the critical path) and W (weight gradient, deferred). Rank r lets its W's lag
# r backwards behind to fill the drain; peak activations stay at 1F1B's P while the bubble falls to
# (P-1)(t_F + t_I - t_W). Its order equals torch's ScheduleInterleavedZeroBubble with V = 1.
schedule zb_h1(P = 4, M = 8) {
  require P >= 1, M >= 1
  stages P
  place loop                      # stage s on rank s
  rank r {
    let warm = min(P - 1 - r, M)  # forwards before the first backward
    for k in 0 .. M + warm {
      if k < M { F(r, k) }
      if k >= warm {
        I(r, k - warm)
        if k - warm >= r { W(r, k - warm - r) }
      }
    }
    for m in max(0, M - r) .. M { W(r, m) }   # the weight gradients still owed
  }
}
