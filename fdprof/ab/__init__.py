"""A/B sessions: two modes run K times each, interleaved, with statistics and a verdict."""
