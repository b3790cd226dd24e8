# DualPipeV (DeepSeek-V3's DualPipe folded into a V, Qi et al.'s cut-in-half variant), as
# torch.distributed.pipelining's ScheduleDualPipeV orders it: each rank holds stage r and stage
# 2P-1-r; in steady state a forward of one chunk runs overlapped with a backward of the other
# (OVERLAP_F_B), and split backwards queue their weight gradients to fill bubbles later.
# `next` is the next microbatch of that kind and stage on this rank; W(next) runs the weight
# gradient of the oldest I still waiting for one (nothing if none is waiting).
schedule dualpipev(P = 4, M = 10) {
  require P >= 1,
          M >= 2 * P else "DualPipeV needs at least as many microbatches as stages (M >= 2P)"
  stages 2 * P
  place vshape                    # rank r holds stages r and 2P-1-r
  rank r {
    let s0 = r
    let s1 = 2 * P - 1 - r
    for i in 0 .. 2 * (P - r - 1) { F(s0, next) }                     # 1: forwards of chunk 0
    for i in 0 .. r + 1 { F(s0, next); F(s1, next) }                  # 2: both chunks
    for i in 0 .. P - r - 1 { I(s1, next); W(next); F(s1, next) }     # 3: zero-bubble I/W on chunk 1
    for i in 0 .. M - 2 * P + r + 1 {                                 # 4: overlapped pairs
      if i == 0 and r == P - 1 { F(s0, next); B(s1, next) }           #    (the last rank's first pair is not)
      else { overlap(F(s0, next), B(s1, next)) }
      overlap(F(s1, next), B(s0, next))
    }
    for i in 0 .. P - r - 1 { B(s1, next); overlap(F(s1, next), B(s0, next)) }   # 5
    let half = (r + 1) // 2                                           # 6: the second half splits I/W
    for i in 0 .. r + 1 {
      if i >= half + (r % 2 == 0 ? 1 : 0) { I(s1, next) } else { B(s1, next) }
      if i >= half { I(s0, next) } else { B(s0, next) }
    }
    for i in 0 .. P - r - 1 { W(next); I(s0, next) }                  # 7
    for i in 0 .. r + 1 { W(next) }                                   # 8: drain the weight queue
  }
}
