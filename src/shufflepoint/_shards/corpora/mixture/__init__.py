"""``Mixture``: several corpora mixed by weight; its orders: fixed counts (``order``), a schedule
(``scheduled``), laid along the ``spans`` deal's stretches (``stretches``)."""
