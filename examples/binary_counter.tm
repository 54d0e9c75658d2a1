# binary_counter: counts up in binary until the counter overflows.
#
# The input is a binary number written least significant digit first, starting at
# the head's cell (cell 0).  The machine adds 1 (turning 1s into 0s until it finds a
# 0), walks back to the blank left of cell 0, and repeats; when the carry runs off
# the right end of the number, every digit is 0 again and it halts.  With n digits
# it counts through all 2^n values, so the run length grows quickly with n: the
# transformer benchmark uses it for runs of 10^3 - 10^4 steps.
#
# input: 000000
# output: 000000
# outcome: halt
# steps: 247

machine binary_counter {
  alphabet: 0 1 _
  blank: _
  start: inc
  halt: done

  inc 1  -> 0 R inc      # 1 + carry = 0, carry on to the right
  inc 0  -> 1 L back     # 0 + carry = 1: done with this increment
  inc _  -> _ S done     # the carry ran off the end: overflow, stop
  back 0 1 -> * L back   # walk back to the start
  back _ -> _ R inc
}
