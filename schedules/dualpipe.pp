# DualPipe (DeepSeek-V3), as DeepSeek's dualpipe.py orders it: two pipelines run over the same P
# ranks in opposite directions, each with half the microbatches. The first half runs down stages
# 0..P-1 (ranks 0 to P-1), the second down stages P..2P-1, a copy of the same model placed the
# other way (stage P+j on rank P-1-j), so each rank holds one stage of each direction and the two
# copies' gradients are summed after the step. In steady state a forward of one direction runs
# overlapped with a backward of the other (OVERLAP_F_B); split backwards fill the bubbles.
# Rank r runs DualPipeV's order at half the size (P/2 ranks, M/2 microbatches) as rank
# min(r, P-1-r), with its two chunks swapped on the second half of the ranks.
schedule dualpipe(P = 4, M = 8) {
  require P >= 2 and P % 2 == 0 else "DualPipe needs an even number of ranks (P >= 2)",
          M % 2 == 0 and M >= 2 * P else "DualPipe needs an even number of microbatches, at least 2P (M >= 2P)"
  stages 2 * P
  place vshape                                  # rank r holds stages r and 2P-1-r
  route microbatches 0 .. M // 2: stages 0 .. P         # direction 0: ranks 0 to P-1
  route microbatches M // 2 .. M: stages P .. 2 * P     # direction 1: ranks P-1 to 0
  rank r {
    let H = P // 2                              # ranks in each half
    let N = M // 2                              # microbatches in each direction
    let h = min(r, P - 1 - r)                   # the rank's place in its half
    let up = r >= H ? 1 : 0                     # on the second half, chunk 0 is direction 1
    let st(c) = (c + up) % 2 == 0 ? r : 2 * P - 1 - r       # the stage of chunk c (0 or 1)
    let mb(c, i) = (c + up) % 2 == 0 ? i : N + i             # the i-th microbatch of chunk c
    let after = H - h - 1                       # ranks after this one in its half
    let pairs = N - P + h + 1                   # steady-state iterations
    for i in 0 .. 2 * after { F(st(0), mb(0, i)) }                                        # 1: nF0
    for i in 0 .. h + 1 { F(st(0), mb(0, 2 * after + i)); F(st(1), mb(1, i)) }           # 2: nF0F1
    for i in 0 .. after { I(st(1), mb(1, i)); W(st(1), mb(1, i)); F(st(1), mb(1, h + 1 + i)) }   # 3: nB1W1F1
    for i in 0 .. pairs {                                                                 # 4: nF0B1F1B0
      if i == 0 and h == H - 1 { F(st(0), mb(0, 2 * after + h + 1)); B(st(1), mb(1, after)) }  # (the middle ranks' first pair is not overlapped)
      else { overlap(F(st(0), mb(0, 2 * after + h + 1 + i)), B(st(1), mb(1, after + i))) }
      overlap(F(st(1), mb(1, H + i)), B(st(0), mb(0, i)))
    }
    for i in 0 .. after {                                                                 # 5: nB1F1B0
      B(st(1), mb(1, N - H + i))
      overlap(F(st(1), mb(1, N - H + h + 1 + i)), B(st(0), mb(0, pairs + i)))
    }
    let half = (h + 1) // 2                                                               # 6: nB1B0, the second
    let split1 = half + (h % 2 == 0 ? 1 : 0)                                              #    half split into I
    for i in 0 .. h + 1 {
      if i >= split1 { I(st(1), mb(1, N - h - 1 + i)) } else { B(st(1), mb(1, N - h - 1 + i)) }
      if i >= half { I(st(0), mb(0, N - H + i)) } else { B(st(0), mb(0, N - H + i)) }
    }
    # The k-th weight gradient left (oldest I first): step 6's I's alternate between the chunks,
    # chunk 0 first where h is even; after the first h + 1 come step 7's, all chunk 0.
    let wc(k) = k > h ? 0 : ((h + k) % 2 == 0 ? 0 : 1)
    let wi(k) = k > h ? N - H + k : ((h + k) % 2 == 0 ? N - H + half + k // 2 : N - h - 1 + split1 + k // 2)
    for i in 0 .. after { W(st(wc(i)), mb(wc(i), wi(i))); I(st(0), mb(0, N - H + h + 1 + i)) }   # 7: nWB0
    for i in 0 .. h + 1 { W(st(wc(after + i)), mb(wc(after + i), wi(after + i))) }                # 8: nW
  }
}
