# binary_increment: adds 1 to a binary number.
#
# The number is written most significant digit first, starting at the head's cell
# (cell 0).  The machine runs right to the end of the number, then walks back
# turning trailing 1s into 0s until it finds a 0 (or the blank left of the number)
# and writes a 1 there.
#
# input: 1011
# output: 1100
# outcome: halt
# steps: 8
#
# Also: 111 -> 1000 (the carry grows the number to the left); the empty input -> 1.

machine binary_increment {
  alphabet: 0 1 _
  blank: _
  start: right
  halt: done

  right 0 1 -> * R *        # skip over the digits
  right _   -> _ L carry    # past the last digit: start adding
  carry 1   -> 0 L carry    # 1 + carry = 0, carry on
  carry 0 _ -> 1 S done     # 0 + carry = 1 (or a new leading 1): done
}
