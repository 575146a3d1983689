"""train, predict, evaluate, save and load against the dslide executable of the same build."""

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import dslide
import tasks
from conftest import REPO, run_cli

# One thread: the first layer's update is HOGWILD, so runs compare exactly on one thread only.
OPTS = dict(iterations=24, hidden=32, seed=5, threads=1, log_every=8)
CLI_OPTS = ["--iterations", "24", "--hidden", "32", "--seed", "5", "--threads", "1",
            "--log-every", "8"]


@pytest.fixture(scope="module")
def model(task):
    return dslide.train((task.X, task.Y), test=(task.Xt, task.Yt), verbose=False, **OPTS)


def test_read_xc_gives_a_files_arrays(task, model, tmp_path):
    """dslide.read_xc: the file's points as (X, Y) SciPy CSR matrices, which train the model
    that the file trains; a malformed file raises naming the file and line."""
    X, Y = dslide.read_xc(task.train_file)
    Xr, Yr, _ = tasks.read_xc(task.train_file)
    assert X.dtype == np.float32 and X.shape == Xr.shape == (task.X.shape[0], 400)
    assert (X != Xr).nnz == 0
    assert Y.shape == (X.shape[0], 1200)
    assert [sorted(Y.indices[Y.indptr[i]:Y.indptr[i + 1]].tolist()) for i in range(Y.shape[0])] \
        == [sorted(y) for y in Yr]
    Xt, Yt = dslide.read_xc(task.test_file)
    again = dslide.train((X, Y), test=(Xt, Yt), verbose=False, **OPTS)
    for p in ("p_at_1", "p_at_5", "loss"):
        assert again.result[p] == model.result[p]
    bad = tmp_path / "bad.txt"
    bad.write_text("2 5 3\n0 1:1.0\n1 7:1.0\n")
    with pytest.raises(ValueError, match="bad.txt:3"):
        dslide.read_xc(bad)


def test_arrays_and_files_train_the_same_model(task, model):
    from_files = dslide.train(task.train_file, test=task.test_file, verbose=False, **OPTS)
    assert (model.features, model.labels, model.iteration) == (400, 1200, 24)
    assert model.layer_sizes == [32, 1200]
    for p in ("p_at_1", "p_at_3", "p_at_5", "loss", "points"):
        assert from_files.result[p] == model.result[p]
    a_ids, a_sc = model.predict(task.Xt, k=5)
    f_ids, f_sc = from_files.predict(task.Xt, k=5)
    np.testing.assert_array_equal(a_ids, f_ids)
    np.testing.assert_array_equal(a_sc, f_sc)
    # A path to predict reads the file's rows.
    p_ids, p_sc = model.predict(task.test_file, k=5)
    np.testing.assert_array_equal(a_ids, p_ids)
    np.testing.assert_array_equal(a_sc, p_sc)


def test_predict_shapes_and_types(task, model):
    ids, scores = model.predict(task.Xt, k=7)
    assert ids.dtype == np.int32 and scores.dtype == np.float32
    assert ids.shape == scores.shape == (task.Xt.shape[0], 7)
    assert (ids >= 0).all() and (ids < task.labels).all()
    assert (np.diff(scores, axis=1) <= 0).all()  # best first
    # --loss auto: 1,200 labels (a log-Q corrected sampled layer), 1.95 a point: one-vs-rest,
    # each label's own probability (a softmax's would sum to at most 1).
    assert model.settings["loss"] == "one-vs-rest"
    assert (scores > 0).all() and (scores < 1).all()
    empty_ids, empty_scores = model.predict(task.Xt[:0], k=3)
    assert empty_ids.shape == empty_scores.shape == (0, 3)


def test_predict_equals_the_executable(task, model, tmp_path):
    folder = tmp_path / "model"
    model.save(folder)
    out = tmp_path / "p.tsv"
    run_cli("predict", "--model", folder, "--input", task.test_file, "--top-k", 5, "--out", out)
    cli_ids, cli_scores = tasks.read_predictions(out)
    ids, scores = model.predict(task.Xt, k=5)
    np.testing.assert_array_equal(ids, cli_ids)
    # The executable prints 6 significant digits.
    np.testing.assert_allclose(scores, cli_scores, rtol=1e-5)


def test_evaluate_equals_the_executable(task, model, tmp_path):
    folder = tmp_path / "model"
    model.save(folder)
    r = model.evaluate(task.Xt, task.Yt)
    assert set(r) >= {"p_at_1", "p_at_3", "p_at_5", "loss"}
    assert r["points"] == task.Xt.shape[0]
    line = run_cli("eval", "--model", folder, "--test", task.test_file).stdout
    expected = {int(k): float(v) for k, v in re.findall(r"P@(\d+) ([0-9.]+)", line)}
    assert sorted(expected) == [1, 3, 5]
    for k, v in expected.items():
        assert round(r[f"p_at_{k}"], 4) == v
    loss = float(re.search(r"\| loss ([0-9.]+)", line).group(1))
    assert r["loss"] == pytest.approx(loss, abs=1e-4)
    # The final test score of training is the same evaluation.
    assert r["p_at_1"] == model.result["p_at_1"]


def test_approximate_predict_equals_the_executable(task, model, tmp_path):
    # The output index of one file gives Python and the executable the same candidates, the
    # same top-k and the same estimated probabilities; its top 5 recalls the exact top 5.
    folder = tmp_path / "model"
    model.save(folder)
    index = tmp_path / "index.hnsw"
    loaded = dslide.load(folder)
    # ef 96: this generated task's layer is searched less easily than a trained real one's
    # (at the default 48 its recall@5 is 0.989).
    assert loaded.build_index(file=index, ef=96) >= 0
    assert index.exists()
    ids, scores = loaded.predict(task.Xt, k=5, approximate=True)
    assert ids.shape == scores.shape == (task.Xt.shape[0], 5)
    out = tmp_path / "a.tsv"
    line = run_cli("predict", "--model", folder, "--input", task.test_file, "--top-k", 5,
                   "--out", out, "--approximate", "--ann-file", index, "--ann-ef", 96).stdout
    assert "read from" in line
    cli_ids, cli_scores = tasks.read_predictions(out)
    np.testing.assert_array_equal(ids, cli_ids)
    np.testing.assert_allclose(scores, cli_scores, rtol=1e-5)
    exact, _ = loaded.predict(task.Xt, k=5)
    recall = np.mean([len(set(a) & set(e)) / 5 for a, e in zip(ids, exact)])
    assert recall >= 0.99, recall
    r = loaded.evaluate(task.Xt, task.Yt, approximate=True)
    assert r["recall"] == pytest.approx(recall, abs=1e-9)
    assert r["exact"] == {**loaded.evaluate(task.Xt, task.Yt), "seconds": r["exact"]["seconds"]}
    assert abs(r["p_at_1"] - r["exact"]["p_at_1"]) <= 2 / task.Xt.shape[0]


def test_approximate_arguments_are_checked(task, model):
    with pytest.raises(TypeError, match="approximate must be True or False"):
        model.predict(task.Xt, k=5, approximate="yes")
    with pytest.raises(ValueError, match=r"m: must be in \[2, 100\], got 1"):
        model.build_index(m=1)
    with pytest.raises(ValueError, match="file: an empty path"):
        model.build_index(file="")
    model.build_index(ef=8, tail=0)
    with pytest.raises(ValueError, match="8 candidates a point, fewer than k = 10"):
        model.predict(task.Xt, k=10, approximate=True)
    ids, _ = model.predict(task.Xt[:5], k=8, approximate=True)
    assert ids.shape == (5, 8)


def test_save_and_load_round_trip(task, model, tmp_path):
    folder = tmp_path / "model"
    model.save(folder)
    assert (folder / "meta.h5").exists()
    loaded = dslide.load(folder)
    assert (loaded.iteration, loaded.labels, loaded.layer_sizes) == (24, 1200, [32, 1200])
    for a, b in zip(loaded.predict(task.Xt), model.predict(task.Xt)):
        np.testing.assert_array_equal(a, b)
    # Saving again replaces the checkpoint folder; a folder of other files is refused.
    loaded.save(folder)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a checkpoint folder"):
        model.save(other)
    assert (other / "notes.txt").read_text() == "mine"
    run_cli("export", "--model", folder, "--out", tmp_path / "model.h5")
    assert (tmp_path / "model.h5").stat().st_size > 0
    # The exported file is a serving model: load reads it, and it predicts the same labels.
    served = dslide.load(tmp_path / "model.h5")
    assert served.iteration == 24 and served.labels == 1200
    ids, scores = served.predict(task.Xt)
    want_ids, want_scores = model.predict(task.Xt)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5)
    with pytest.raises(ValueError, match="not a readable HDF5|no complete checkpoint"):
        dslide.load(tmp_path / "other" / "notes.txt")


def test_weights_are_the_layers_as_training_numbers_them(task, model, tmp_path):
    """Model.weights(): {"layer1": {...}, "layer2": {...}} (numbered from 1, as training's
    start lines print the layers), weights (out, in) a row per neuron, the output layer's row
    i label i's: the forward pass in NumPy gives predict's labels and scores."""
    w = model.weights()
    assert list(w) == ["layer1", "layer2"]
    assert all(set(layer) == {"weights", "biases"} for layer in w.values())
    W1, b1 = w["layer1"]["weights"], w["layer1"]["biases"]
    W2, b2 = w["layer2"]["weights"], w["layer2"]["biases"]
    assert W1.shape == (32, 400) and b1.shape == (32,)
    assert W2.shape == (1200, 32) and b2.shape == (1200,)
    assert {a.dtype for a in (W1, b1, W2, b2)} == {np.dtype(np.float32)}
    X = task.Xt.toarray().astype(np.float64)
    z = np.maximum(X @ W1.T + b1, 0) @ W2.T + b2
    assert model.settings["loss"] == "one-vs-rest"  # each label's sigmoid (--loss auto)
    p = 1 / (1 + np.exp(-z))
    ids, scores = model.predict(task.Xt, k=5)
    # predict's labels have predict's probabilities, and they are the 5 largest.
    np.testing.assert_allclose(np.take_along_axis(p, ids.astype(np.int64), axis=1), scores,
                               rtol=1e-4)
    np.testing.assert_allclose(-np.sort(-p, axis=1)[:, :5], scores, rtol=1e-4)
    # Copies: changing them leaves the model as it was.
    W2[:] = 0
    np.testing.assert_array_equal(model.predict(task.Xt, k=5)[0], ids)
    # A saved and loaded model holds the same arrays.
    model.save(tmp_path / "model")
    again, loaded = model.weights(), dslide.load(tmp_path / "model").weights()
    assert list(loaded) == list(again)
    for name, layer in loaded.items():
        for key, value in layer.items():
            np.testing.assert_array_equal(value, again[name][key])


def h5_dataset(path, name):
    """A float32 dataset of an HDF5 file, read with h5dump (hdf5-tools) as another tool
    would, in the shape h5dump's header gives."""
    raw = f"{path}.{name.strip('/').replace('/', '_')}.bin"
    subprocess.run(["h5dump", "-b", "LE", "-d", name, "-o", raw, str(path)], check=True,
                   capture_output=True)
    header = subprocess.run(["h5dump", "-H", "-d", name, str(path)], check=True,
                            capture_output=True, text=True).stdout
    dims = re.search(r"DATASPACE\s+SIMPLE\s+\{\s*\(([0-9, ]+)\)", header).group(1)
    return np.fromfile(raw, dtype="<f4").reshape([int(d) for d in dims.split(",")])


@pytest.mark.skipif(shutil.which("h5dump") is None or shutil.which("h5ls") is None,
                    reason="h5dump and h5ls (hdf5-tools) are not installed")
def test_export_names_layers_as_training_and_weights_do(task, model, tmp_path):
    """dslide export writes /layer1 ... /layerN (numbered from 1, as training prints the
    layers), each with the arrays Model.weights() gives under the same name."""
    folder = tmp_path / "model"
    model.save(folder)
    out = tmp_path / "model.h5"
    run_cli("export", "--model", folder, "--out", out)
    listing = subprocess.run(["h5ls", str(out)], check=True, capture_output=True,
                             text=True).stdout
    groups = re.findall(r"^(\S+)\s+Group", listing, re.M)
    assert groups == ["layer1", "layer2", "meta"]  # meta: what makes it a serving model
    w = model.weights()
    for name in groups[:2]:
        np.testing.assert_array_equal(h5_dataset(out, f"/{name}/weights"), w[name]["weights"])
        np.testing.assert_array_equal(h5_dataset(out, f"/{name}/biases"), w[name]["biases"])


def test_load_reads_what_the_executable_trained(task, model, tmp_path):
    """The executable and train() run the same trainer: equal options, equal models."""
    folder = tmp_path / "cli_model"
    run_cli("train", "--train", task.train_file, "--test", task.test_file, *CLI_OPTS,
            "--save", folder)
    loaded = dslide.load(folder)
    for a, b in zip(loaded.predict(task.Xt, k=5), model.predict(task.Xt, k=5)):
        np.testing.assert_array_equal(a, b)
    # A --checkpoint-dir holds checkpoints: load takes the newest.
    ck = tmp_path / "ck"
    run_cli("train", "--train", task.train_file, *CLI_OPTS, "--checkpoint-dir", ck,
            "--checkpoint-every", 12)
    assert dslide.load(ck).iteration == 24
    with pytest.raises(FileNotFoundError):
        dslide.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="no complete checkpoint"):
        dslide.load(tmp_path)


def test_resume_from_a_saved_model_continues_the_run(task, model, tmp_path):
    """Model.save records the data position: resuming it equals training on."""
    half = dslide.train((task.X, task.Y), verbose=False, **{**OPTS, "iterations": 12})
    half.save(tmp_path / "half")
    resumed = dslide.train((task.X, task.Y), resume=tmp_path / "half", verbose=False, **OPTS)
    assert resumed.iteration == 24
    for a, b in zip(resumed.predict(task.Xt), model.predict(task.Xt)):
        np.testing.assert_array_equal(a, b)


def test_options_are_the_executables(task):
    with pytest.raises(ValueError, match=r"unrecognised option '--epoch'.*did you mean --epochs"):
        dslide.train((task.X, task.Y), epoch=3)
    with pytest.raises(ValueError, match=r"option --lr: must be a finite number > 0, got -1"):
        dslide.train((task.X, task.Y), lr=-1.0)
    with pytest.raises(ValueError, match=r"option --hidden: each size must be in \[1, "):
        dslide.train((task.X, task.Y), hidden=[64, 0])
    with pytest.raises(ValueError, match=r"option --keep-best selects on validation data"):
        dslide.train((task.X, task.Y), keep_best=True)
    with pytest.raises(ValueError, match=r"option --strategy: invalid value 'dense'"):
        dslide.train((task.X, task.Y), strategy="dense")
    with pytest.raises(ValueError, match="options_help"):
        dslide.train((task.X, task.Y), help=True)
    with pytest.raises(TypeError, match="option hidden"):
        dslide.train((task.X, task.Y), hidden={"a": 1})
    # A data set under a misspelt keyword names the keyword, not the value's type.
    with pytest.raises(TypeError, match=r"unknown keyword validation=.*did you mean valid=\?"):
        dslide.train((task.X, task.Y), validation=(task.Xt, task.Yt))
    # A Y without any label: nothing to learn, refused rather than a 1-label model.
    with pytest.raises(ValueError, match="train: Y holds no labels"):
        dslide.train((task.X, [[] for _ in range(task.X.shape[0])]), iterations=2)
    assert "--valid-fraction" in dslide.options_help()


def test_an_empty_option_value_says_so(task):
    """An empty string for an option is refused with the executable's message for
    `--checkpoint-dir ""` (not the parser's "should follow immediately after the equal
    sign"), and an empty path for a data set names the set."""
    for key in ("checkpoint_dir", "save", "metrics", "resume", "config", "lr", "hash"):
        option = key.replace("_", "-")
        with pytest.raises(ValueError, match=rf"^option --{option}: an empty value \(leave the "
                                             rf"option out to go without it\)$"):
            dslide.train((task.X, task.Y), iterations=2, verbose=False, **{key: ""})
    for name in ("test", "valid"):
        with pytest.raises(ValueError, match=rf"^{name}: an empty path"):
            dslide.train((task.X, task.Y), iterations=2, verbose=False, **{name: ""})
    with pytest.raises(ValueError, match=r"^train: an empty path"):
        dslide.train("", iterations=2, verbose=False)
    with pytest.raises(ValueError, match=r"^train: an empty path"):
        dslide.train(b"", iterations=2, verbose=False)


def test_keyword_options_reach_the_trainer(task, tmp_path):
    metrics = tmp_path / "m.jsonl"
    m = dslide.train((task.X, task.Y), valid_fraction=0.2, hidden=[16, 8], sparsity=[1, 1, 0.05],
                     dense_adam=True, lsh_mips=False, iterations=6, eval_every=3, threads=1,
                     metrics=metrics, label_order="identity", verbose=False)
    s = m.settings
    assert s["hidden"] == "16,8" and s["sparsity"] == "1,1,0.05" and s["dense-adam"] is True
    assert s["valid-fraction"] == 0.2 and s["label-order"] == "identity"
    assert m.layer_sizes == [16, 8, 1200]
    assert [it for it, _ in m.evals] == [3, 6]
    start = json.loads(metrics.read_text().splitlines()[0])
    assert start["event"] == "start" and start["points"] == 1200  # 20 % held back
    assert start["settings"]["train"] == "train (arrays)"


def test_saving_into_a_read_only_folder_is_refused(task, tmp_path):
    # An empty folder of mode 555 was replaced by the checkpoint (as root too).
    m = dslide.train((task.X, task.Y), iterations=1, hidden=8, threads=1, verbose=False)
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(PermissionError, match=r"is read-only \(mode 555\): make it writable"):
            m.save(folder)
        assert folder.is_dir() and not list(folder.iterdir())
        assert folder.stat().st_mode & 0o777 == 0o555
    finally:
        folder.chmod(0o755)
    m.save(folder)  # writable: saved
    assert (folder / "meta.h5").is_file()


def test_one_mistyped_label_id_is_refused_not_made_outputs(task):
    # One id of 100,000 among ids below 1,200 made a 100,001-output model without a word.
    Y = [list(y) for y in task.Y]
    Y[17] = [100000]
    with pytest.raises(ValueError, match=r"^train: label id 100000 is more than 10 times the "
                                         r"next largest \(11[0-9][0-9]\): the output layer "
                                         r"would have 100001 neurons"):
        dslide.train((task.X, Y), iterations=1, threads=1, verbose=False)
    # Meant: a sparse Y of that many columns trains it.
    rows = [i for i, y in enumerate(Y) for _ in y]
    Ysp = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, [l for y in Y for l in y])),
                        shape=(len(Y), 100001))
    assert dslide.train((task.X, Ysp), iterations=1, hidden=8, threads=1,
                        verbose=False).labels == 100001


def test_a_loaded_model_reports_the_settings_it_was_trained_with(task, tmp_path):
    # load(folder).settings reported the defaults of the options the checkpoint's shapes do
    # not set (lr 0.001, batch 256, ...); it reports what the run used, as the checkpoint
    # records it.
    m = dslide.train((task.X, task.Y), hidden=[16], lr=0.003, batch=64, dropout=0.1,
                     iterations=4, threads=1, verbose=False)
    m.save(tmp_path / "m")
    s, trained = dslide.load(tmp_path / "m").settings, m.settings
    assert s["lr"] == "0.003" and s["batch"] == 64 and s["dropout"] == "0.1" and s["hidden"] == "16"
    for key in ("hash", "K", "L", "query", "lsh-share", "label-order", "seed"):
        assert s[key] == trained[key], key
    # The output layer's (the loaded model says every layer's: "1,0.213...").
    assert s["sparsity"].split(",")[-1] == trained["sparsity"].split(",")[-1]
    # What the training data chose is not in the checkpoint: said as auto, not a default.
    assert s["first-lr-scale"] == "auto" and trained["first-lr-scale"] != "auto"
    assert set(s) == set(trained)


def test_validation_and_test_arrays(task):
    m = dslide.train((task.X, task.Y), valid=(task.Xt, task.Yt), test=(task.Xt, task.Yt),
                     iterations=6, eval_every=3, hidden=16, threads=1, verbose=False)
    assert len(m.evals) == 2
    # A CSR label matrix works alike, and sets the label count.
    Ysp = sp.lil_matrix((task.X.shape[0], task.labels), dtype=np.float32)
    for i, ys in enumerate(task.Y):
        Ysp[i, ys] = 1
    a = dslide.train((task.X, Ysp.tocsr()), iterations=6, hidden=16, threads=1, seed=2,
                     verbose=False)
    b = dslide.train((task.X, task.Y), iterations=6, hidden=16, threads=1, seed=2, verbose=False)
    np.testing.assert_array_equal(a.predict(task.Xt)[0], b.predict(task.Xt)[0])


def test_progress_lines_go_to_stderr(task, capfd):
    dslide.train((task.X, task.Y), iterations=4, log_every=2, hidden=16, threads=1)
    out, err = capfd.readouterr()
    assert "iter 2/4" in err and "iter 4/4" in err and "1500 training points" in err
    assert "iter" not in out and "training points" not in out
    dslide.train((task.X, task.Y), iterations=4, log_every=2, hidden=16, threads=1,
                 verbose=False)
    out, err = capfd.readouterr()
    assert "iter" not in out + err
    print("still stdout")
    out, _ = capfd.readouterr()
    assert out == "still stdout\n"


def test_progress_lines_through_python_streams(task, capsys):
    # The lines come through sys.stderr (capsys replaces it), not file descriptor 2.
    dslide.train((task.X, task.Y), iterations=4, log_every=2, hidden=16, threads=1)
    out, err = capsys.readouterr()
    assert "iter 2/4" in err and "iter 4/4" in err and "1500 training points" in err
    assert out == ""


def test_callback_runs_on_the_calling_thread_beside_file_descriptor_1(task, capfd):
    # The records come to the callback as the run reports them, on the thread that called
    # train(), while descriptor 1 stays where it was (nothing redirects it during training).
    seen = []

    def callback(o):
        seen.append(threading.get_ident())
        if "loss" in o and "event" not in o:
            os.write(1, b"progress %d\n" % o["iter"])

    dslide.train((task.X, task.Y), iterations=4, log_every=2, hidden=16, threads=1,
                 verbose=False, callback=callback)
    out, err = capfd.readouterr()
    assert seen and set(seen) == {threading.get_ident()}
    assert out == "progress 2\nprogress 4\n" and err == ""


def test_callback_gets_the_metrics_objects(task):
    seen = []
    dslide.train((task.X, task.Y), test=(task.Xt, task.Yt), iterations=6, log_every=2,
                 hidden=16, threads=1, verbose=False, callback=seen.append)
    assert seen[0]["event"] == "start" and seen[0]["labels"] == 1200
    progress = [o["iter"] for o in seen if "loss" in o and "event" not in o]
    assert progress == [2, 4, 6]
    assert seen[-1]["set"] == "test" and 0 <= seen[-1]["p_at_1"] <= 1


def test_a_failing_callback_stops_the_run_and_keeps_the_model(task):
    # A stopping rule of the caller's: Stopped, from the callback's exception, with the model
    # of the step that reported.
    def callback(o):
        if o.get("iter") == 2:
            raise LookupError("enough")

    with pytest.raises(dslide.Stopped, match="stopped by the callback .* at iteration 2") as e:
        dslide.train((task.X, task.Y), iterations=100000, log_every=2, hidden=16, threads=1,
                     verbose=False, callback=callback)
    assert isinstance(e.value.__cause__, LookupError) and str(e.value.__cause__) == "enough"
    model = e.value.model
    assert model is not None and model.iteration == 2
    ids, _ = model.predict(task.Xt[:4], k=3)
    assert ids.shape == (4, 3) and (ids >= 0).all()


def test_a_callback_that_cannot_be_called_is_refused_before_training(task):
    with pytest.raises(TypeError, match="callback must be callable .* got int"):
        dslide.train((task.X, task.Y), iterations=100000, hidden=16, threads=1, verbose=False,
                     callback=5)


def test_threads_option(task):
    one = dslide.train((task.X, task.Y), iterations=3, hidden=16, threads=1, verbose=False)
    two = dslide.train((task.X, task.Y), iterations=3, hidden=16, threads=2, verbose=False,
                       callback=lambda o: None)
    assert one.settings["threads"] == 1 and two.settings["threads"] == 2
    ids, _ = two.predict(task.Xt, threads=2)
    assert ids.shape == (task.Xt.shape[0], 5)
    # 0 is the default for predict as for train (threads=0, --threads 0).
    ids0, _ = two.predict(task.Xt, threads=0)
    np.testing.assert_array_equal(ids0, ids)
    with pytest.raises(ValueError, match="threads"):
        two.predict(task.Xt, threads=-1)


def test_version_and_backends():
    assert dslide.__version__.count(".") == 2
    assert "cpu" in dslide.backends
    assert os.path.basename(dslide._core.__file__).startswith("_core")


def test_build_index_defaults_are_the_clis():
    """Model.build_index's keywords default to `dslide predict`'s --ann-m, --ann-ef,
    --ann-build-ef and --ann-tail (docs/options.md, generated from the parser and checked
    against it by the options_doc test): one source for both."""
    with open(os.path.join(REPO, "docs", "options.md"), encoding="utf-8") as f:
        page = f.read()
    predict = page[page.index("## dslide predict"):]
    params = inspect.signature(dslide.Model.build_index).parameters
    for key in ("m", "ef", "build_ef", "tail"):
        option = "--ann-" + key.replace("_", "-")
        cli = re.search(rf"{option} arg \(=(\d+)\)", predict)
        assert cli, option
        assert params[key].default == int(cli.group(1)), key


@pytest.mark.parametrize("given, expected", [
    ({}, ("PASSIVE", "10000")),                              # neither: a short spin, then sleep
    ({"OMP_WAIT_POLICY": "ACTIVE"}, ("ACTIVE", None)),       # the user's policy stays alone
    ({"GOMP_SPINCOUNT": "1000"}, (None, "1000")),            # the user's spin count stays alone
])
def test_idle_threads_follow_the_users_choice_else_spin_briefly(given, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(given)
    code = ("import os, dslide; "
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert tuple(None if v == "None" else v for v in out) == expected
