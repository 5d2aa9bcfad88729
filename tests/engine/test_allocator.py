import pytest

from fdprof.engine.allocator import BlockAllocator, OutOfBlocks


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


def test_smallest_free_id_first_as_a_heap():
    """As FastDeploy's heappop: ids in increasing order, a freed id back in its place."""
    a = BlockAllocator(8)
    assert a.allocate(3) == [0, 1, 2]
    a.free([1])
    assert a.allocate(2) == [1, 3]
    a.free([2, 0])
    assert a.allocate(3) == [0, 2, 4]


def test_double_free_is_refused():
    a = BlockAllocator(4)
    (b,) = a.allocate(1)
    a.free([b])
    with pytest.raises(ValueError):
        a.free([b])
