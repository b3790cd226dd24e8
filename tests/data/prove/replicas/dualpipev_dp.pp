# schedules/dualpipev.pp as a job of D identical replicas, each rank reducing each of its stages'
# gradients after its last backward (a test input of tests/test_prove_replicas.py).
# DualPipeV (DeepSeek-V3's DualPipe folded into a V, Qi et al.'s cut-in-half variant), as
# torch.distributed.pipelining's ScheduleDualPipeV orders it: each rank holds stage r and stage
# 2P-1-r; in steady state a forward of one chunk runs overlapped with a backward of the other
# (OVERLAP_F_B), and split backwards leave their weight gradients for later, to fill bubbles.
# Microbatches are numbered explicitly (what `next` would count), so `schedc prove` covers it;
# tests/data/prove/dualpipev_next.pp is the same schedule written with `next`.
schedule dualpipev_dp(P = 4, M = 10, D = 2) {
  require P >= 1,
          M >= 2 * P else "DualPipeV needs at least as many microbatches as stages (M >= 2P)"
  require D >= 1
  stages 2 * P
  replicas D
  place vshape                    # rank r holds stages r and 2P-1-r
  rank r {
    let s0 = r
    let s1 = 2 * P - 1 - r
    let after = P - r - 1         # ranks after this one
    let pairs = M - 2 * P + r + 1 # steady-state iterations
    for i in 0 .. 2 * after { F(s0, i) }                                 # 1: forwards of chunk 0
    for i in 0 .. r + 1 { F(s0, 2 * after + i); F(s1, i) }              # 2: both chunks
    for i in 0 .. after { I(s1, i); W(s1, i); F(s1, r + 1 + i) }        # 3: zero-bubble I/W on chunk 1
    for i in 0 .. pairs {                                               # 4: overlapped pairs
      if i == 0 and r == P - 1 { F(s0, 2 * after + r + 1); B(s1, after) } #    (the last rank's first pair is not)
      else { overlap(F(s0, 2 * after + r + 1 + i), B(s1, after + i)) }
      overlap(F(s1, P + i), B(s0, i))
    }
    for i in 0 .. after { B(s1, M - P + i); overlap(F(s1, M - P + r + 1 + i), B(s0, pairs + i)) }   # 5
    let half = (r + 1) // 2                                             # 6: the second half splits I/W
    let split1 = half + (r % 2 == 0 ? 1 : 0)                            #    (chunk 1 from here)
    for i in 0 .. r + 1 {
      if i >= split1 { I(s1, M - r - 1 + i) } else { B(s1, M - r - 1 + i) }
      if i >= half { I(s0, M - P + i) } else { B(s0, M - P + i) }
    }
    # The k-th weight gradient left (oldest I first): step 6's I's alternate between the chunks,
    # chunk 0 first where r is even; after the first r + 1 come step 7's, all chunk 0.
    let wstage(k) = k > r ? s0 : ((r + k) % 2 == 0 ? s0 : s1)
    let wmb(k) = k > r ? M - P + k : ((r + k) % 2 == 0 ? M - P + half + k // 2 : M - r - 1 + split1 + k // 2)
    for i in 0 .. after { W(wstage(i), wmb(i)); I(s0, M - P + r + 1 + i) }   # 7
    for i in 0 .. r + 1 { W(wstage(after + i), wmb(after + i)) }             # 8: the rest of the weight gradients
    REDUCE_GRAD(r)
    REDUCE_GRAD(2 * P - 1 - r)
  }
}
