// Atomic structures (proteins, nucleic acids, ligands) without LibTorch: the atoms of a
// predicted or experimental structure with one set of coordinates per model (a structure
// diffusion model's samples), written as mmCIF (an atom_site loop) or as fixed-column PDB, and
// read back from either, defensively (a bad file is an error naming its line and what is wrong).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace yeto::structure {

struct Atom {
  std::string name;     // "CA", "C4'" (1-4 characters in PDB)
  std::string element;  // "C", "FE" read as written; "" unknown
  std::string residue;  // "ALA", "A", "ATP" (at most 3 characters in PDB)
  std::string chain;    // "A", ..., "Z", "AA", ...
  std::int64_t residue_index = 0;  // 1-based sequence position within the chain
  bool hetero = false;             // HETATM (a ligand, an ion, water)
  float occupancy = 1.f;
  float b_factor = 0.f;
};

using Coordinates = std::vector<std::array<float, 3>>;  // one per atom, Å

// Atoms and, per model (a sample of a structure model, or an NMR model), their coordinates:
// every model has one coordinate per atom.
struct Structure {
  std::string name = "structure";  // the mmCIF data block / entry id
  std::vector<Atom> atoms;
  std::vector<Coordinates> models;
};

// The chain id of a 0-based chain index: A..Z, then AA, AB, ..., AZ, BA, ... (as spreadsheet
// columns). Throws std::invalid_argument for a negative index.
std::string chain_id(std::int64_t index);

// Element symbol of atomic number z (1..118; "H", "He" ... "Og"), "" for 0 (unknown); throws
// std::invalid_argument outside 0..118. atomic_number: the inverse, case-insensitive ("FE",
// "Fe"), 0 for "", "X" or an unknown symbol.
std::string element_symbol(std::int64_t z);
int atomic_number(const std::string& symbol);

// Throws std::invalid_argument naming what is inconsistent: no model, a model whose size is
// not the atom count, a non-finite coordinate, an empty atom or residue name or chain, a
// residue index below 1.
void validate(const Structure& s);

// mmCIF text: data_<name>, _entry.id and one atom_site loop (group_PDB, id, type_symbol,
// label_atom_id, label_alt_id, label_comp_id, label_asym_id, label_entity_id, label_seq_id,
// pdbx_PDB_ins_code, Cartn_x/y/z, occupancy, B_iso_or_equiv, auth_seq_id, auth_comp_id,
// auth_asym_id, auth_atom_id, pdbx_PDB_model_num) with every model's atoms (models numbered
// from 1). Each chain is its own entity (label_entity_id = chain order + 1). Values with a
// quote, a space or a leading CIF token character are quoted ("C4'").
std::string mmcif_text(const Structure& s);

// PDB text: ATOM / HETATM records in the fixed columns of the PDB format v3.3 (the atom name
// starting in column 14 when it has fewer than 4 characters and a one-letter element), TER
// after each chain, MODEL / ENDMDL around each model when there are several, END. Throws
// std::invalid_argument (naming the atom) for what the format cannot hold: more than 99999
// serial numbers (atoms + TER records) per model, a residue index above 9999, a chain id longer
// than one character (more than 26 chains), a residue name over 3 or an atom name over 4
// characters, a coordinate outside [-999.999, 9999.999]. Write mmCIF for those.
std::string pdb_text(const Structure& s);

// Writes `s` atomically in the format of the extension: .cif / .mmcif (mmCIF) or .pdb.
// Throws yeto::Error (bad_input) for another extension or what validate / pdb_text refuse.
void write_structure(const std::filesystem::path& path, const Structure& s);

// Parsers. `where` names the input in errors ("<where>:<line>: <what>"), all yeto::Error
// (bad_input).
// mmCIF: the first data block's atom_site category (a loop, columns in any order, or a single
// atom as _atom_site.x value pairs); quoted values, ';' text fields, comments, '?' (unknown)
// and '.' (inapplicable). Needs Cartn_x/y/z and an atom name (label_atom_id or auth_atom_id);
// the residue, chain and residue index come from the label_* items, else the auth_* ones
// (label_seq_id '.' of a ligand: auth_seq_id); the element from type_symbol ('?': unknown).
// Models by pdbx_PDB_model_num (1 when absent); atoms (names, residues, chains) from the
// first model; every other model must list the same number of atoms.
Structure parse_mmcif(const std::string& text, const std::string& where);
// PDB: ATOM / HETATM (columns 1-54 required, occupancy, B-factor and element when present;
// the element guessed from the atom name's columns when absent), MODEL / ENDMDL; other records
// are skipped.
Structure parse_pdb(const std::string& text, const std::string& where);
// By extension: .cif / .mmcif or .pdb / .ent.
Structure read_structure(const std::filesystem::path& path);

}  // namespace yeto::structure
