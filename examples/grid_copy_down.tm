# grid_copy_down: copies the first row of a 2D tape into the row below it.
#
# The input row is written from the head's cell rightwards (row 0).  For each cell
# the machine remembers the symbol, steps down (D), writes it there, steps back up
# (U) and moves on to the right, until it reads a blank.
#
# Rows of the input and of the output tape are separated by '/'.  The head ends
# on row 0, just right of the input.
#
# input: 1101
# output: 1101/1101
# outcome: halt
# steps: 13

machine grid_copy_down {
  tape: grid
  alphabet: 0 1 _
  blank: _
  start: read
  halt: done

  read 0 -> 0 D put0          # remember the symbol and step down
  read 1 -> 1 D put1
  read _ -> _ S done          # end of the row
  put0 * -> 0 U next          # write the copy, step back up
  put1 * -> 1 U next
  next * -> * R read          # on to the next cell
}
