# palindrome: accepts binary strings that read the same both ways.
#
# Repeatedly erases the leftmost symbol, remembers it in the state, runs to the
# right end and compares it with the rightmost symbol.  A mismatch rejects; running
# out of symbols accepts.  The empty string is a palindrome.
#
# input: 10101
# output: ''
# outcome: accept
# steps: 21
#
# The tape ends up erased.  Also: 1101 -> outcome reject (state no).

machine palindrome {
  alphabet: 0 1 _
  blank: _
  start: first
  accept: yes
  reject: no

  first _ -> _ S yes         # nothing left: accept
  first 0 -> _ R have0       # erase the leftmost symbol, remember it
  first 1 -> _ R have1

  have0 0 1 -> * R *         # run to the right end
  have0 _   -> _ L last0
  have1 0 1 -> * R *
  have1 _   -> _ L last1

  last0 0 -> _ L back        # rightmost matches: erase it and go back
  last0 1 -> * S no
  last0 _ -> _ S yes         # the remembered symbol was the middle one
  last1 1 -> _ L back
  last1 0 -> * S no
  last1 _ -> _ S yes

  back 0 1 -> * L *          # return to the left end
  back _   -> _ R first
}
