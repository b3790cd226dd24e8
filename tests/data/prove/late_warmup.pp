# A 1F1B whose warm-up is wrong when there are fewer microbatches than ranks: it lets later ranks
# warm up longer than earlier ones, so for M < P rank r's first backward waits (through rank r+1)
# for a forward rank r runs only after it. Fine for every M >= P; a hang for M < P (from P=3, M=2).
schedule late_warmup(P = 4, M = 8) {
  require P >= 1, M >= 1
  stages P
  place loop
  rank r {
    let warm = M < P ? min(r, M) : P - 1 - r
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
