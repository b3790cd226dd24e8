# GPipe (Huang et al., 2019): every rank runs all forwards, then all backwards (fill, drain).
# Simple and robust; peak activations are M per rank, so it needs the most memory.
schedule gpipe(P = 4, M = 8) {
  require P >= 1 else "GPipe needs at least one rank",
          M >= 1 else "GPipe needs at least one microbatch"
  stages P
  place loop                      # stage s on rank s
  rank r {
    for m in 0 .. M { F(r, m) }
    for m in 0 .. M { B(r, m) }
  }
}
