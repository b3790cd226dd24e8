# schedules/zbv.pp as a job of D identical replicas, each rank reducing each of its stages'
# gradients after its last backward (a test input of tests/test_prove_replicas.py).
# ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", 2024), as torch.distributed.pipelining's
# ScheduleZBVZeroBubble orders it: two chunks per rank in a V (stages r and 2P-1-r), the backward
# split into I and W; with t_F = t_I = t_W the pipeline has no bubble in steady state. torch fills
# the order as if there were n = max(2P-1, M) microbatches and then drops those beyond M.
schedule zbv_dp(P = 4, M = 8, D = 2) {
  require P >= 1, M >= 1
  require D >= 1
  stages 2 * P
  replicas D
  place vshape                    # rank r holds stages r and 2P-1-r
  rank r {
    let n = max(2 * P - 1, M)
    let c0 = r
    let c1 = 2 * P - 1 - r
    let steady = n - P            # iterations of the steady phase
    # warm-up: forwards of chunk 0, then both chunks, then chunk 1 with its backward
    for m in 0 .. 2 * (P - r) - 1 { if m < M { F(c0, m) } }
    for i in 0 .. r {
      if i < M { F(c1, i) }
      if 2 * (P - r) - 1 + i < M { F(c0, 2 * (P - r) - 1 + i) }
    }
    for i in 0 .. P - r {
      if r + i < M { F(c1, r + i) }
      if i < M { I(c1, i); W(c1, i) }
    }
    # steady: F0 I0 W0 F1 I1 W1
    for t in 0 .. steady {
      let f0 = 2 * P - r - 1 + t
      if f0 < n and f0 < M { F(c0, f0) }
      if t < M { I(c0, t); W(c0, t) }
      if P + t < M { F(c1, P + t) }
      if P - r + t < M { I(c1, P - r + t); W(c1, P - r + t) }
    }
    # cool-down: the remaining backwards, weight gradients last
    for i in 0 .. r {
      if steady + i < M { I(c0, steady + i) }
      if n - r + i < M { I(c1, n - r + i) }
    }
    for i in 0 .. P - r {
      if steady + r + i < M { I(c0, steady + r + i) }
      if steady + i < M { W(c0, steady + i) }
    }
    for m in n - r .. n { if m < M { W(c1, m) } }
    for m in steady + P - r .. n { if m < M { W(c0, m) } }
    REDUCE_GRAD(r)
    REDUCE_GRAD(2 * P - 1 - r)
  }
}
