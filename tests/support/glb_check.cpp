#include "support/glb_check.hpp"

namespace yeto::test {

ProcessResult python_glb_counts(const std::string& path, std::optional<double> bound) {
  const char* script =
      "import json, struct, sys\n"
      "b = open(sys.argv[1], 'rb').read()\n"
      "magic, version, length = struct.unpack_from('<III', b, 0)\n"
      "assert magic == 0x46546C67 and version == 2 and length == len(b), (magic, version, length)\n"
      "jlen, jtype = struct.unpack_from('<II', b, 12)\n"
      "assert jtype == 0x4E4F534A and jlen % 4 == 0\n"
      "doc = json.loads(b[20:20 + jlen])\n"
      "blen, btype = struct.unpack_from('<II', b, 20 + jlen)\n"
      "assert btype == 0x004E4942 and blen == doc['buffers'][0]['byteLength']\n"
      "binary = b[28 + jlen:28 + jlen + blen]\n"
      "prim = doc['meshes'][0]['primitives'][0]\n"
      "pos = doc['accessors'][prim['attributes']['POSITION']]\n"
      "idx = doc['accessors'][prim['indices']]\n"
      "view = doc['bufferViews'][idx['bufferView']]\n"
      "faces = struct.unpack_from('<%dI' % idx['count'], binary, view['byteOffset'])\n"
      "assert max(faces) < pos['count']\n"
      "if len(sys.argv) > 2:\n"
      "    pview = doc['bufferViews'][pos['bufferView']]\n"
      "    xyz = struct.unpack_from('<%df' % (3 * pos['count']), binary, pview['byteOffset'])\n"
      "    assert all(abs(v) <= float(sys.argv[2]) for v in xyz)\n"
      "print(pos['count'], idx['count'] // 3)\n";
  std::vector<std::string> argv{"python3", "-c", script, path};
  if (bound) argv.push_back(std::to_string(*bound));
  return run_process(argv);
}

}  // namespace yeto::test
