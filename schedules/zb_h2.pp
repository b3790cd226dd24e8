# ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): more forwards in flight (peak
# activations 2P-1) so that, with M >= 2P, every rank works without a gap from its first action
# to its last. The order is what the paper's heuristic builds: whenever a rank is free it runs a
# ready input gradient first, else a forward while its memory allows, else a weight gradient.
schedule zb_h2(P = 4, M = 8) {
  require P >= 1, M >= 1
  stages P
  place loop                      # stage s on rank s
  order greedy(prefer = [I, F, W], memory = 2 * P - 1)
  rank r { for m in 0 .. M { F(r, m); I(r, m); W(r, m) } }
}
