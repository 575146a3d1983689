"""Which exception a failure raises (docs/python.md, "Errors"): options, data, files and
checkpoints that fail their checks raise ValueError (a missing file FileNotFoundError),
wherever the check is made, also once training has begun to set up; a failure while training
raises RuntimeError."""

import os

import pytest

import dslide
import tasks

FEW = dict(iterations=4, hidden=8, threads=1, verbose=False, seed=1)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("errors")
    X, Y = tasks.generate(200, 50, 30, seed=4)
    path = str(folder / "train.txt")
    tasks.write_xc(path, X, Y, 30)
    model = dslide.train((X, Y), **FEW)
    saved = str(folder / "saved")
    model.save(saved)
    return X, Y, path, saved


def test_read_xc_of_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="read_xc: no such file: .*missing.txt"):
        dslide.read_xc(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="Is a directory"):
        dslide.read_xc(tmp_path)


def test_a_resumed_checkpoint_that_does_not_fit_is_a_value_error(small):
    X, Y, _, saved = small
    with pytest.raises(ValueError, match=r"layer 1 has 8 neurons in the checkpoint, 16 here"):
        dslide.train((X, Y), resume=saved, **{**FEW, "hidden": 16, "iterations": 8})
    with pytest.raises(ValueError, match=r"--seed 9 differs from the checkpoint's 1"):
        dslide.train((X, Y), resume=saved, **{**FEW, "seed": 9, "iterations": 8})
    with pytest.raises(ValueError, match=r"at iteration 4, beyond the 2 iterations asked for"):
        dslide.train((X, Y), resume=saved, **{**FEW, "iterations": 2})
    X2, Y2 = tasks.generate(200, 60, 30, seed=4)
    with pytest.raises(ValueError, match=r"the checkpoint's network \(50 inputs, 2 layers\) "
                                         r"does not match this one \(60 inputs"):
        dslide.train((X2, Y2), resume=saved, **{**FEW, "iterations": 8})
    # The checkpoint still resumes with fitting options.
    assert dslide.train((X, Y), resume=saved, **{**FEW, "iterations": 8}).iteration == 8


def test_unusable_output_paths_are_value_errors(small, tmp_path):
    X, Y, _, _ = small
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    with pytest.raises(ValueError, match=r"option --checkpoint-dir: cannot create .*a_file"):
        dslide.train((X, Y), checkpoint_dir=a_file, **FEW)
    with pytest.raises(ValueError, match=r"option --save: .*a_file exists and is not a "
                                         r"checkpoint folder"):
        dslide.train((X, Y), save=a_file, **FEW)
    with pytest.raises(ValueError, match=r"option --metrics: cannot write .*Is a directory"):
        dslide.train((X, Y), metrics=tmp_path, **FEW)
    assert a_file.read_text() == "mine"


def test_metrics_may_not_overwrite_the_training_file(small, tmp_path):
    """As for `dslide train --metrics`: the metrics lines would be appended to the input."""
    _, _, path, _ = small
    copy = tmp_path / "train.txt"
    copy.write_bytes(open(path, "rb").read())
    before = copy.read_bytes()
    with pytest.raises(ValueError, match=r"option --metrics: .*train.txt is --train's file"):
        dslide.train(str(copy), metrics=str(copy), **FEW)
    with pytest.raises(ValueError, match=r"option --metrics: .*is --test's file"):
        dslide.train(path, test=str(copy), metrics=os.path.join(tmp_path, ".", "train.txt"),
                     **FEW)
    assert copy.read_bytes() == before


@pytest.mark.skipif("gpu" in dslide.backends, reason="this build has the CUDA backend")
def test_a_device_this_build_lacks_is_a_value_error(small):
    X, Y, _, _ = small
    with pytest.raises(ValueError, match="--device gpu: this dslide was built without CUDA"):
        dslide.train((X, Y), device="gpu", **FEW)


def test_a_damaged_shard_is_a_value_error(small, tmp_path):
    """load checks meta.h5 first, then each shard as it reads it: both are ValueError."""
    _, _, _, saved = small
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(saved):
        (copy / name).write_bytes(open(os.path.join(saved, name), "rb").read())
    shard = copy / "rank-00000.h5"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"rank-00000.h5"):
        dslide.load(copy)


def test_a_failure_while_training_stays_a_runtime_error(small):
    X, Y, _, _ = small
    with pytest.raises(RuntimeError) as e:
        dslide.train((X, Y), lr=1e30, divergence_factor=0, **FEW)
    assert not isinstance(e.value, ValueError)
    assert "non-finite loss" in str(e.value)
    # The model and the process keep working after each of these errors.
    ids, _ = dslide.train((X, Y), **FEW).predict(X[:3])
    assert ids.shape == (3, 5)


def test_save_to_a_folder_that_cannot_be_made_is_a_value_error(small, tmp_path):
    X, Y, _, _ = small
    model = dslide.train((X, Y), **FEW)
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    with pytest.raises(ValueError, match=r"save: cannot create .*a_file/model: .*a_file is a "
                                         r"file, not a folder"):
        model.save(a_file / "model")
    assert a_file.read_text() == "mine"
    model.save(tmp_path / "new" / "model")  # missing folders above it are made
    assert (tmp_path / "new" / "model" / "meta.h5").exists()
