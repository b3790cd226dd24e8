# ZB-H2 as it was written before schedules/zb_h2.pp spelled its order out: the paper's heuristic as
# an `order greedy` (whenever a rank is free it runs a ready input gradient first, else a forward
# while at most 2P-1 activations are live, else a weight gradient), ordered at unit costs.
# tests/test_zb_h2_explicit.py holds the explicit form to this one.
schedule zb_h2_greedy(P = 4, M = 8) {
  require P >= 1, M >= 1
  stages P
  place loop                      # stage s on rank s
  order greedy(prefer = [I, F, W], memory = 2 * P - 1)
  rank r { for m in 0 .. M { F(r, m); I(r, m); W(r, m) } }
}
