"""Fixtures a few unit tests ask for by name (`pytestmark = pytest.mark.usefixtures(...)`)."""
import pytest


@pytest.fixture
def one_thread():
    """torch on one thread, as a pinned rank runs: tiny networks crawl when OpenMP threads contend."""
    import torch  # here: most unit tests never import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
