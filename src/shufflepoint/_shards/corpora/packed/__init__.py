"""``Packed``: documents packed into rows of ``seq_len`` tokens; an epoch's rows (``rows``), laid along the
``spans`` deal's stretches (``stretches``), and the collates attention reads (``collate``)."""
