"""Names of the columns the join adds to a stream's tuples, as filters and indexes see them; '@' keeps them apart
from user fields."""

SEQ = "@seq"  # arrival number across the streams
SSEQ = "@sseq"  # arrival number within the stream (count windows are ranges of it)
TS = "@ts"  # event time
WSTART = "@window_start"  # the start of the window a copy of a tuple stands for (tumbling, hopping)
