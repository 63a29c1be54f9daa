"""lab/chunk_cost.py counts what it says: executed instructions of checked concats."""

import json

import chunk_cost


def test_a_chunk_more_costs_a_thread_more_instructions():
    assert chunk_cost.count(4, 3, 1) > chunk_cost.count(4, 2, 1) > 0


def test_a_tile_of_more_vectors_costs_a_thread_more_instructions():
    assert chunk_cost.count(1, 2, 4) > chunk_cost.count(1, 2, 1)


def test_compare_reads_two_records(tmp_path, capsys):
    case = {"granule": 1, "chunks": 2, "per_thread": {"1": 10, "4": 40}, "fixed": 0.0, "per_vector": 10.0}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"cases": [case | {"fixed": 20.0}]}))
    b.write_text(json.dumps({"cases": [case]}))
    chunk_cost.main(["--compare", str(a), str(b)])
    assert "10.0" in capsys.readouterr().out  # (20 - 0) / 2 chunks
