// A stand-in for AlphaFold 3's run_alphafold.py (Python, standard library only): it records its
// arguments, working directory and environment in <output_dir>/stand_in_record.json, prints a
// line to stdout and one to stderr, and, unless the input JSON asks it to fail with
// {"exit": N}, writes an AlphaFold 3-style job folder <output_dir>/<name>/ holding the
// top-ranked <name>_model.cif (three atoms, an RNA nucleotide's primed names among them, in the
// column set AlphaFold 3 writes), a per-sample model and the ranking scores. With
// --run_inference=false it writes only <name>_data.json (the data pipeline's output); an input
// named "Garbled" gets a model whose atom_site loop is cut short.
#pragma once

#include <string>

namespace yeto::test {

inline const std::string kStandInRunAlphafold = R"PY(import json, os, sys
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
out = flags["output_dir"]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "stand_in_record.json"), "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}, f)
print("stand-in: predicting " + flags["json_path"])
print("stand-in: a warning on stderr", file=sys.stderr)
with open(flags["json_path"]) as f:
    fold = json.load(f)
if fold.get("exit"):
    print("stand-in: failing as asked", file=sys.stderr)
    sys.exit(fold["exit"])
job = fold["name"].lower()
if "--run_inference=false" in sys.argv:
    os.makedirs(os.path.join(out, job))
    with open(os.path.join(out, job, job + "_data.json"), "w") as f:
        json.dump(fold, f)
    sys.exit(0)
cif = """data_{job}
#
_entry.id {job}
#
loop_
_atom_site.group_PDB
_atom_site.id
_atom_site.type_symbol
_atom_site.label_atom_id
_atom_site.label_alt_id
_atom_site.label_comp_id
_atom_site.label_asym_id
_atom_site.label_entity_id
_atom_site.label_seq_id
_atom_site.pdbx_PDB_ins_code
_atom_site.Cartn_x
_atom_site.Cartn_y
_atom_site.Cartn_z
_atom_site.occupancy
_atom_site.B_iso_or_equiv
_atom_site.auth_seq_id
_atom_site.auth_asym_id
_atom_site.pdbx_PDB_model_num
ATOM 1 N N . GLY A 1 1 ? 1.250 -2.500 3.750 1.00 91.50 1 A 1
ATOM 2 C CA . GLY A 1 1 ? 2.000 -2.000 4.000 1.00 92.25 1 A 1
ATOM 3 C "C4'" . A B 2 1 ? -7.125 0.500 12.000 1.00 70.00 1 B 1
#
""".format(job=job)
if job == "garbled":
    cif = cif.replace("1.00 70.00 1 B 1", "1.00 70.00")
folder = os.path.join(out, job)
os.makedirs(os.path.join(folder, "seed-1_sample-0"))
with open(os.path.join(folder, job + "_model.cif"), "w") as f:
    f.write(cif)
with open(os.path.join(folder, "seed-1_sample-0", job + "_seed-1_sample-0_model.cif"), "w") as f:
    f.write(cif)
with open(os.path.join(folder, job + "_ranking_scores.csv"), "w") as f:
    f.write("seed,sample,ranking_score\n1,0,0.75\n")
)PY";

}  // namespace yeto::test
