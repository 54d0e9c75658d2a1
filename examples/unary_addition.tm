# unary_addition: adds two numbers in unary.
#
# The input is  1^m + 1^n ; the machine turns the '+' into a 1, runs to the right
# end and erases the last 1, leaving 1^(m+n).
#
# input: 111+11
# output: 11111
# outcome: halt
# steps: 8

machine unary_addition {
  alphabet: 1 + _
  blank: _
  start: scan
  halt: done

  scan 1  -> 1 R scan        # skip the first number
  scan +  -> 1 R end         # join the two numbers
  end 1   -> 1 R end         # skip the second number
  end _   -> _ L erase
  erase 1 -> _ S done        # one 1 too many: erase it
}
