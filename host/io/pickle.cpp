#include "io/pickle.hpp"

#include <cstring>
#include <map>

#include "core/error.hpp"

namespace yeto::io {
namespace {

// Opcodes of pickle protocols 0-5 that appear in torch.save output or are refused by name.
enum : unsigned char {
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', BINFLOAT = 'G', BININT = 'J', BININT1 = 'K',
  BININT2 = 'M', NONE = 'N', BINPERSID = 'Q', REDUCE = 'R', BINSTRING = 'T', SHORT_BINSTRING = 'U',
  BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}', APPENDS = 'e',
  BINGET = 'h', LONG_BINGET = 'j', LIST = 'l', EMPTY_LIST = ']', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', PROTO = 0x80, TUPLE1 = 0x85, TUPLE2 = 0x86,
  TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d,
  BINBYTES8 = 0x8e, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95, SHORT_BINBYTES = 'C', BINBYTES = 'B',
};

const char* opcode_name(unsigned char op) {
  switch (op) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'P': return "PERSID";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8b: return "LONG4";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return "unknown";
  }
}

struct StorageName {
  const char* name;
  DType dtype;
};
constexpr StorageName kStorages[] = {
    {"DoubleStorage", DType::F64}, {"FloatStorage", DType::F32}, {"HalfStorage", DType::F16},
    {"BFloat16Storage", DType::BF16}, {"LongStorage", DType::I64}, {"IntStorage", DType::I32},
    {"ShortStorage", DType::I16}, {"CharStorage", DType::I8}, {"ByteStorage", DType::U8},
    {"BoolStorage", DType::BOOL},
};

class Machine {
 public:
  Machine(std::string_view program, const std::string& label) : p_(program), label_(label) {}

  PickleResult run() {
    while (true) {
      if (pos_ >= p_.size()) fail("the pickle ends without STOP");
      op_pos_ = pos_;
      const auto op = static_cast<unsigned char>(p_[pos_++]);
      if (op == STOP) break;
      step(op);
    }
    if (stack_.size() != 1) fail("the pickle leaves " + std::to_string(stack_.size()) + " values instead of one");
    if (!marks_.empty()) fail("the pickle leaves an open MARK");
    res_.root = stack_.back();
    return std::move(res_);
  }

 private:
  using V = PyValue;
  using K = PyValue::Kind;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(label_ + ": cannot load (weights-only): " + what + " (pickle byte " + std::to_string(op_pos_) + ")",
                ExitCode::bad_input);
  }
  std::string_view take(std::uint64_t n) {
    if (n > p_.size() - pos_) fail("the pickle is truncated");
    std::string_view s = p_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  std::uint64_t le(int n) {
    const std::string_view s = take(static_cast<std::uint64_t>(n));
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[static_cast<std::size_t>(i)]);
    return v;
  }
  std::string line() {
    const std::size_t e = p_.find('\n', pos_);
    if (e == std::string_view::npos) fail("the pickle is truncated");
    std::string s(p_.substr(pos_, e - pos_));
    pos_ = e + 1;
    return s;
  }
  V* make(K k) {
    if (res_.arena.size() > p_.size() + 16) fail("too many objects");
    res_.arena.push_back(std::make_unique<V>());
    res_.arena.back()->kind = k;
    return res_.arena.back().get();
  }
  void push(const V* v) { stack_.push_back(v); }
  const V* pop() {
    if (stack_.size() <= base()) fail("the pickle pops from an empty stack");
    const V* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  const V* top() {
    if (stack_.size() <= base()) fail("the pickle reads an empty stack");
    return stack_.back();
  }
  std::size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<const V*> pop_mark() {
    if (marks_.empty()) fail("the pickle has no MARK to pop to");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<const V*> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  V* mutable_(const V* v) { return const_cast<V*>(v); }  // values are owned by the arena
  const V* memo_get(std::uint64_t i) {
    const auto it = memo_.find(i);
    if (it == memo_.end()) fail("the pickle reads memo slot " + std::to_string(i) + ", which was never written");
    return it->second;
  }
  void memo_put(std::uint64_t i) {
    if (memo_.size() > p_.size()) fail("too many memo entries");
    memo_[i] = top();
  }
  const V* str(std::string_view s, K k = K::string) {
    V* v = make(k);
    v->text.assign(s);
    return v;
  }
  const V* integer(std::int64_t i) {
    V* v = make(K::integer);
    v->integer = i;
    return v;
  }

  const V* global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    static const char* const allowed[] = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                          "torch._utils._rebuild_parameter", "_codecs.encode",
                                          "torch._utils._rebuild_parameter_with_state"};
    bool ok = false;
    for (const char* a : allowed) ok = ok || full == a;
    DType d;
    if (module == "torch" && storage_dtype_from_name(name, d)) ok = true;
    if (!ok)
      fail("the file references the Python global '" + full +
           "', which a weights-only load refuses (only tensors, storages, dict/OrderedDict/list/tuple and "
           "primitive values are accepted); re-save the file as a plain state_dict, or as safetensors");
    return str(full, K::global);
  }

  void set_items(const V* dict, const std::vector<const V*>& kv) {
    if (dict->kind != K::dict) fail(std::string("SETITEMS on a ") + V::kind_name(dict->kind));
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    for (std::size_t i = 0; i < kv.size(); i += 2) {
      const K kk = kv[i]->kind;
      if (kk != K::string && kk != K::integer && kk != K::boolean && kk != K::floating && kk != K::none &&
          kk != K::tuple)
        fail(std::string("a dict key is a ") + V::kind_name(kk));
      mutable_(dict)->entries.emplace_back(kv[i], kv[i + 1]);
    }
  }
  void append(const V* list, const std::vector<const V*>& items) {
    if (list->kind != K::list) fail(std::string("APPEND to a ") + V::kind_name(list->kind));
    auto& dst = mutable_(list)->items;
    dst.insert(dst.end(), items.begin(), items.end());
  }

  std::vector<std::int64_t> int_tuple(const V* v, const char* what) {
    if (v->kind != K::tuple && v->kind != K::list) fail(std::string(what) + " is not a tuple");
    std::vector<std::int64_t> out;
    for (const V* x : v->items) {
      if (x->kind != K::integer) fail(std::string(what) + " holds a non-integer");
      out.push_back(x->integer);
    }
    return out;
  }

  const V* reduce(const V* callable, const V* args) {
    if (callable->kind != K::global) fail(std::string("REDUCE calls a ") + V::kind_name(callable->kind));
    if (args->kind != K::tuple) fail("REDUCE arguments are not a tuple");
    const std::string& f = callable->text;
    const auto& a = args->items;
    if (f == "collections.OrderedDict") {
      if (!a.empty()) fail("OrderedDict() with arguments");
      V* d = make(K::dict);
      d->ordered = true;
      return d;
    }
    if (f == "torch._utils._rebuild_tensor_v2") {
      if (a.size() < 4) fail("_rebuild_tensor_v2 with " + std::to_string(a.size()) + " arguments");
      if (a[0]->kind != K::storage) fail("_rebuild_tensor_v2 without a storage");
      if (a[1]->kind != K::integer) fail("_rebuild_tensor_v2 storage offset is not an integer");
      V* t = make(K::tensor);
      t->storage = a[0];
      t->storage_offset = a[1]->integer;
      t->size = int_tuple(a[2], "tensor size");
      t->stride = int_tuple(a[3], "tensor stride");
      if (a.size() > 4) t->requires_grad = a[4]->kind == K::boolean && a[4]->boolean;
      if (t->size.size() != t->stride.size()) fail("tensor size and stride differ in length");
      return t;
    }
    if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state") {
      if (a.size() < 2 || a[0]->kind != K::tensor) fail("_rebuild_parameter without a tensor");
      V* t = make(K::tensor);
      *t = *a[0];
      t->requires_grad = a[1]->kind == K::boolean && a[1]->boolean;
      return t;
    }
    if (f == "_codecs.encode") {
      if (a.size() != 2 || a[0]->kind != K::string || a[1]->kind != K::string || a[1]->text != "latin1")
        fail("_codecs.encode is only accepted as (str, 'latin1'), the way pickle writes bytes");
      // The text is UTF-8 of code points < 256; latin1 maps each code point to one byte.
      std::string out;
      const std::string& s = a[0]->text;
      for (std::size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) out += static_cast<char>(c);
        else if ((c & 0xe0) == 0xc0 && i + 1 < s.size()) {
          out += static_cast<char>(((c & 0x1f) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3f));
          ++i;
        } else fail("_codecs.encode of a character beyond latin1");
      }
      return str(out, K::bytes);
    }
    if (callable->text.rfind("torch.", 0) == 0) fail("the storage class " + f + " is called directly");
    fail("REDUCE of " + f);
  }

  const V* persistent(const V* pid) {
    // ('storage', torch.<Type>Storage, key, location, numel)
    if (pid->kind != K::tuple || pid->items.size() < 5) fail("a persistent id that is not a storage record");
    const auto& a = pid->items;
    if (a[0]->kind != K::string || a[0]->text != "storage") fail("a persistent id of an unknown kind");
    if (a[1]->kind != K::global) fail("a storage record without a storage type");
    const std::string& type = a[1]->text;
    DType d;
    if (type.rfind("torch.", 0) != 0 || !storage_dtype_from_name(std::string_view(type).substr(6), d))
      fail("the storage type " + type + " is not supported");
    if (a[2]->kind != K::string) fail("a storage key that is not a string");
    if (a[4]->kind != K::integer || a[4]->integer < 0) fail("a storage size that is not a count");
    const std::string key = a[2]->text;
    const auto it = storages_.find(key);
    if (it != storages_.end()) return it->second;
    V* s = make(K::storage);
    s->storage_key = key;
    s->storage_dtype = d;
    s->location = a[3]->kind == K::string ? a[3]->text : "";
    s->storage_numel = static_cast<std::uint64_t>(a[4]->integer);
    storages_[key] = s;
    return s;
  }

  void step(unsigned char op) {
    switch (op) {
      case PROTO: {
        const auto v = le(1);
        if (v > 5) fail("pickle protocol " + std::to_string(v) + " is not supported");
        return;
      }
      case FRAME: le(8); return;
      case MARK:
        if (marks_.size() > 10000) fail("too many nested MARKs");
        marks_.push_back(stack_.size());
        return;
      case POP: pop(); return;
      case POP_MARK: pop_mark(); return;
      case DUP: push(top()); return;
      case NONE: push(make(K::none)); return;
      case NEWTRUE:
      case NEWFALSE: {
        V* v = make(K::boolean);
        v->boolean = op == NEWTRUE;
        push(v);
        return;
      }
      case BININT: push(integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4))))); return;
      case BININT1: push(integer(static_cast<std::int64_t>(le(1)))); return;
      case BININT2: push(integer(static_cast<std::int64_t>(le(2)))); return;
      case LONG1: {
        const auto n = le(1);
        if (n > 8) fail("an integer wider than 64 bits");
        std::uint64_t v = n ? le(static_cast<int>(n)) : 0;
        if (n && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~0ull << (8 * n);  // sign-extend
        push(integer(static_cast<std::int64_t>(v)));
        return;
      }
      case BINFLOAT: {
        const std::uint64_t bits = [&] {
          const std::string_view s = take(8);  // big-endian
          std::uint64_t b = 0;
          for (char c : s) b = (b << 8) | static_cast<unsigned char>(c);
          return b;
        }();
        V* v = make(K::floating);
        std::memcpy(&v->floating, &bits, 8);
        push(v);
        return;
      }
      case SHORT_BINUNICODE: push(str(take(le(1)))); return;
      case BINUNICODE: push(str(take(le(4)))); return;
      case BINUNICODE8: push(str(take(le(8)))); return;
      case SHORT_BINSTRING: push(str(take(le(1)))); return;
      case BINSTRING: push(str(take(le(4)))); return;
      case SHORT_BINBYTES: push(str(take(le(1)), K::bytes)); return;
      case BINBYTES: push(str(take(le(4)), K::bytes)); return;
      case BINBYTES8: push(str(take(le(8)), K::bytes)); return;
      case EMPTY_DICT: push(make(K::dict)); return;
      case EMPTY_LIST: push(make(K::list)); return;
      case EMPTY_TUPLE: push(make(K::tuple)); return;
      case DICT: {
        const auto kv = pop_mark();
        const V* d = make(K::dict);
        set_items(d, kv);
        push(d);
        return;
      }
      case LIST: {
        const auto items = pop_mark();
        V* l = make(K::list);
        l->items = items;
        push(l);
        return;
      }
      case TUPLE: {
        const auto items = pop_mark();
        V* t = make(K::tuple);
        t->items = items;
        push(t);
        return;
      }
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const std::size_t n = op - TUPLE1 + 1u;
        std::vector<const V*> items(n);
        for (std::size_t i = n; i-- > 0;) items[i] = pop();
        V* t = make(K::tuple);
        t->items = std::move(items);
        push(t);
        return;
      }
      case APPEND: {
        const V* v = pop();
        append(top(), {v});
        return;
      }
      case APPENDS: {
        const auto items = pop_mark();
        append(top(), items);
        return;
      }
      case SETITEM: {
        const V* v = pop();
        const V* k = pop();
        set_items(top(), {k, v});
        return;
      }
      case SETITEMS: {
        const auto kv = pop_mark();
        set_items(top(), kv);
        return;
      }
      case BINPUT: memo_put(le(1)); return;
      case LONG_BINPUT: memo_put(le(4)); return;
      case MEMOIZE: memo_put(memo_.size()); return;
      case BINGET: push(memo_get(le(1))); return;
      case LONG_BINGET: push(memo_get(le(4))); return;
      case GLOBAL: {
        const std::string module = line();
        const std::string name = line();
        push(global(module, name));
        return;
      }
      case STACK_GLOBAL: {
        const V* name = pop();
        const V* module = pop();
        if (name->kind != K::string || module->kind != K::string) fail("STACK_GLOBAL of non-strings");
        push(global(module->text, name->text));
        return;
      }
      case REDUCE: {
        const V* args = pop();
        const V* callable = pop();
        push(reduce(callable, args));
        return;
      }
      case BUILD: {
        const V* state = pop();
        const V* obj = top();
        // OrderedDict state (a state_dict's _metadata) and parameter state carry nothing we need.
        if (obj->kind == K::dict && (state->kind == K::dict || state->kind == K::none)) return;
        if (obj->kind == K::tensor) return;
        fail(std::string("BUILD on a ") + V::kind_name(obj->kind));
      }
      case BINPERSID: push(persistent(pop())); return;
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        fail(std::string("the pickle opcode ") + opcode_name(op) + " (" + hex +
             ") is not allowed in a weights-only load");
      }
    }
  }

  std::string_view p_;
  const std::string& label_;
  std::size_t pos_ = 0, op_pos_ = 0;
  PickleResult res_;
  std::vector<const V*> stack_;
  std::vector<std::size_t> marks_;
  std::map<std::uint64_t, const V*> memo_;
  std::map<std::string, const V*> storages_;
};

}  // namespace

const char* PyValue::kind_name(Kind k) {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::bytes: return "bytes";
    case Kind::list: return "list";
    case Kind::tuple: return "tuple";
    case Kind::dict: return "dict";
    case Kind::tensor: return "tensor";
    case Kind::storage: return "storage";
    case Kind::global: return "global";
  }
  return "?";
}

bool storage_dtype_from_name(std::string_view storage_class, DType& out) {
  for (const auto& s : kStorages)
    if (storage_class == s.name) {
      out = s.dtype;
      return true;
    }
  return false;
}

PickleResult unpickle_weights_only(std::string_view program, const std::string& label) {
  return Machine(program, label).run();
}

}  // namespace yeto::io
