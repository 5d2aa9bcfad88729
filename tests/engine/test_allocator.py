import pytest

from engine.allocator import BlockAllocator, OutOfBlocks


def test_allocates_distinct_blocks_until_empty():
    a = BlockAllocator(8)
    got = a.allocate(5) + a.allocate(3)
    assert sorted(got) == list(range(8))
    assert a.num_free == 0
    with pytest.raises(OutOfBlocks):
        a.allocate(1)


def test_all_or_nothing():
    a = BlockAllocator(4)
    a.allocate(3)
    with pytest.raises(OutOfBlocks):
        a.allocate(2)
    assert a.num_free == 1


def test_freed_block_is_handed_out_next():
    a = BlockAllocator(8)
    ids = a.allocate(4)
    a.free([ids[2]])
    assert a.allocate(1) == [ids[2]]


def test_double_free_is_refused():
    a = BlockAllocator(4)
    (b,) = a.allocate(1)
    a.free([b])
    with pytest.raises(ValueError):
        a.free([b])
