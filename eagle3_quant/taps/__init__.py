"""Everything about taps (which target layers feed the draft's fc) that needs no stage."""
