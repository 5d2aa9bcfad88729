from fdprof.engine.prefix_cache import PrefixCache, block_hashes


def test_hashes_cover_whole_prefixes():
    a = block_hashes([1, 2, 3, 4, 5, 6, 7], 2)
    b = block_hashes([9, 9, 3, 4, 5, 6], 2)
    assert len(a) == 3 and len(b) == 3
    assert a[1] != b[1]  # same block tokens, different prefix
    assert block_hashes([1, 2, 3, 4, 0], 2) == a[:2]
    assert block_hashes([1, 2, 3, 4, 5, 6], 2, limit=1) == a[:1]


def test_match_stops_at_first_miss():
    c = PrefixCache()
    hs = block_hashes(list(range(8)), 2)
    c.insert(hs[0], 10, fp=1)
    c.insert(hs[2], 12, fp=3)
    assert [e.gpu for e in c.match(hs)] == [10]


def test_duplicate_insert_keeps_first():
    c = PrefixCache()
    (h,) = block_hashes([1, 2], 2)
    assert c.insert(h, 5, fp=1) is not None
    assert c.insert(h, 6, fp=1) is None
    assert c.get(h).gpu == 5


def test_evictable_is_lru_and_skips_held_and_moving():
    c = PrefixCache()
    hs = block_hashes(list(range(10)), 2)
    es = [c.insert(h, i, fp=i) for i, h in enumerate(hs)]
    for e in es:
        e.ref = 0
    es[0].ref = 1
    es[1].swapping_out = True
    c.touch(es[2])
    assert [e.gpu for e in c.evictable(10)] == [3, 4, 2]
    assert [e.gpu for e in c.evictable(1)] == [3]


def test_entry_with_no_copy_is_dropped():
    c = PrefixCache()
    (h,) = block_hashes([1, 2], 2)
    e = c.insert(h, 5, fp=1)
    e.gpu = None
    c.drop_if_empty(e)
    assert c.get(h) is None and c.match([h]) == []
