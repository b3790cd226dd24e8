# Two replicas of an interleaved pipeline (two stages per rank) that reduce their two stages in
# different orders: the k-th all-reduces of a data-parallel group meet different stages.
schedule reduce_order(P = 2, M = 2) {
  stages 2 * P
  place loop
  replicas 2
  rank r, replica d {
    for m in 0 .. M { F(r, m) F(r + P, m) }
    for m in 0 .. M { B(r + P, m) B(r, m) }
    if d == 0 { REDUCE_GRAD(r) REDUCE_GRAD(r + P) } else { REDUCE_GRAD(r + P) REDUCE_GRAD(r) }
  }
}
