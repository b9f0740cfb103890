import pytest

tf = pytest.importorskip("tensorflow")


@pytest.fixture(autouse=True)
def _seeded():
    import keras

    keras.utils.set_random_seed(0)
