//! `nft -f` scripts: `add|create table|chain|set|map|rule|element`, `insert rule`,
//! `flush ruleset|table|chain|set|map` and `delete|destroy ...`, as kube-proxy's nftables
//! mode writes its transactions. Each command changes the ruleset read so far; a script
//! is [`Completeness::Partial`] unless it starts with `flush ruleset`.

use super::lexer::{Tok, Token};
use super::{FAMILIES, Reader};
use crate::model::nft::{NftSet, SetKind, unquote};
use crate::model::{Completeness, Family, Rule, RuleBody};

/// Whether `VERB OBJECT` is an nft script command that builds or changes a ruleset.
pub(super) fn builds_ruleset(verb: &str, object: &str) -> bool {
    matches!(
        (verb, object),
        (
            "add" | "create",
            "table" | "chain" | "set" | "map" | "rule" | "element"
        ) | ("insert", "rule")
            | ("flush", "ruleset" | "table" | "chain" | "set" | "map")
            | (
                "delete" | "destroy",
                "table" | "chain" | "set" | "map" | "rule" | "element"
            )
    )
}

/// Rules' 1-based positions after an insert or a removal.
fn renumber(rules: &mut [Rule]) {
    for (i, r) in rules.iter_mut().enumerate() {
        r.position = i as u32 + 1;
    }
}

impl<'a> Reader<'a> {
    /// One command of an nft script (`nft -f` input) at the top level. Returns false,
    /// consuming nothing, when the statement is not a command that builds or changes a
    /// ruleset (`list`, `monitor`, `add counter` ... are noted and skipped by the caller).
    pub(super) fn script_command(&mut self) -> bool {
        let verb_tok = self.toks[self.pos];
        let verb = self.s(&verb_tok);
        let Some(obj_tok) = self
            .toks
            .get(self.pos + 1)
            .copied()
            .filter(|t| t.kind == Tok::Word)
        else {
            return false;
        };
        let object = self.s(&obj_tok);
        if !builds_ruleset(verb, object) {
            return false;
        }
        if object == "ruleset" {
            // `flush ruleset` (nftables.conf's first line): everything after it is the
            // whole ruleset, whatever came before.
            self.pos += 2;
            self.ruleset.tables.clear();
            self.chain_index.clear();
            self.dead_tables.clear();
            self.dead_chains.clear();
            self.deleted_names.clear();
            self.from_scratch = true;
            if self.ruleset.completeness == Completeness::Partial {
                self.ruleset.completeness = Completeness::Full;
            }
            self.end_of_command(verb_tok);
            return true;
        }
        if self.from_scratch {
            // Commands after `flush ruleset` build the whole ruleset: not partial.
        } else if self.ruleset.completeness == Completeness::Full {
            self.ruleset.completeness = Completeness::Partial;
        }
        if !self.script_noted && !self.from_scratch {
            self.script_noted = true;
            let line = self.text[verb_tok.line_start..]
                .lines()
                .next()
                .unwrap_or("");
            self.note(
                &verb_tok,
                "an nft script (commands for `nft -f`, like kube-proxy's nftables transactions): it changes kernel state this text does not show, so the ruleset read is partial",
                line,
            );
        }
        self.pos += 1;
        if object == "table" && matches!(verb, "add" | "create") {
            self.table_header(true);
            self.end_of_command(verb_tok);
            return true;
        }
        self.pos += 1;
        let words = if object == "table" { 1 } else { 2 };
        let Some((family, path)) = self.object_path(words) else {
            let stmt = self.skip_statement();
            self.error(
                &verb_tok,
                format!(
                    "expected '{verb} {object} [FAMILY] {}'",
                    if words == 1 { "NAME" } else { "TABLE NAME" }
                ),
                stmt,
            );
            return true;
        };
        let loc = self.loc(&obj_tok);
        let creates = matches!(verb, "add" | "create" | "insert");
        let ti = match self.find_table(family, path[0]) {
            Some(ti) => ti,
            None if creates => self.table_index(family, path[0], loc),
            None => {
                // Flushing or deleting in a table the script never declared: it lives
                // in the kernel, and the script's text says nothing about it.
                self.skip_statement();
                return true;
            }
        };
        match (verb, object) {
            ("add" | "create", "chain") => {
                let ci = self.chain_of(ti, path[1], loc);
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.chain_body(ti, ci, obj_tok, path[1]);
                }
            }
            ("add" | "create", "set" | "map") => {
                let kind = if object == "map" {
                    SetKind::Map
                } else {
                    SetKind::Set
                };
                let mut set = NftSet {
                    name: path[1].into(),
                    kind,
                    location: loc,
                    ..NftSet::default()
                };
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.set_body(&mut set, obj_tok);
                }
                let sets = &mut self.ruleset.tables[ti].sets;
                match sets.iter_mut().find(|s| s.name == set.name) {
                    // `add` of an existing set keeps it (and its elements).
                    Some(existing) => existing.elements.append(&mut set.elements),
                    None => sets.push(set),
                }
            }
            ("add" | "insert", "rule") => {
                let ci = self.chain_of(ti, path[1], loc);
                if let Some(w) = self.peek_word()
                    && matches!(w, "position" | "index" | "handle")
                {
                    let at = self.toks[self.pos];
                    self.pos += 1;
                    if self.peek().is_some_and(|t| t.kind == Tok::Word) {
                        self.pos += 1;
                    }
                    self.note(
                        &at,
                        format!(
                            "'{w} N' is not followed: the rule is placed at the chain's {}",
                            if verb == "insert" { "start" } else { "end" }
                        ),
                        w,
                    );
                }
                if !self
                    .peek()
                    .is_some_and(|t| !matches!(t.kind, Tok::Newline | Tok::Semi | Tok::RBrace))
                {
                    self.error(
                        &obj_tok,
                        format!("expected a rule after '{verb} rule [FAMILY] TABLE CHAIN'"),
                        path[1],
                    );
                    self.end_of_command(verb_tok);
                    return true;
                }
                let before = self.ruleset.tables[ti].chains[ci].rules.len();
                self.rule(ti, ci);
                let rules = &mut self.ruleset.tables[ti].chains[ci].rules;
                if verb == "insert" && rules.len() > before {
                    rules.rotate_right(1);
                    renumber(rules);
                }
                return true;
            }
            ("add" | "create" | "delete" | "destroy", "element") => {
                let existing = self.ruleset.tables[ti]
                    .sets
                    .iter()
                    .position(|s| &*s.name == path[1]);
                let adding = matches!(verb, "add" | "create");
                let mut list = match existing {
                    // `delete element` lists keys only: read them as a plain set.
                    Some(si) if adding => NftSet {
                        name: path[1].into(),
                        kind: self.ruleset.tables[ti].sets[si].kind,
                        value_type: self.ruleset.tables[ti].sets[si].value_type.clone(),
                        ..NftSet::default()
                    },
                    _ => NftSet {
                        name: path[1].into(),
                        location: loc,
                        ..NftSet::default()
                    },
                };
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.element_list(&mut list, obj_tok);
                } else {
                    let stmt = self.skip_statement();
                    self.error(&obj_tok, "expected '{ ELEMENT, ... }'", stmt);
                    return true;
                }
                let sets = &mut self.ruleset.tables[ti].sets;
                match (existing, verb) {
                    (Some(si), "add" | "create") => sets[si].elements.append(&mut list.elements),
                    (Some(si), _) => sets[si]
                        .elements
                        .retain(|e| !list.elements.iter().any(|d| d.key_text == e.key_text)),
                    // Elements of a set the script does not declare: it exists in the
                    // kernel; keep what is added under its name.
                    (None, "add" | "create") => sets.push(list),
                    (None, _) => {}
                }
            }
            ("flush", "chain") => {
                if let Some(&ci) = self.chain_index.get(&(ti, path[1])) {
                    self.ruleset.tables[ti].chains[ci].rules.clear();
                }
            }
            ("flush", "set" | "map") => {
                if let Some(set) = self.ruleset.tables[ti]
                    .sets
                    .iter_mut()
                    .find(|s| &*s.name == path[1])
                {
                    set.elements.clear();
                }
            }
            ("flush", "table") => {
                let table = &mut self.ruleset.tables[ti];
                table.chains.iter_mut().for_each(|c| c.rules.clear());
                table.sets.iter_mut().for_each(|s| s.elements.clear());
            }
            (_, "chain") => self.delete_chain(ti, path[1]),
            (_, "set" | "map") => self.ruleset.tables[ti].sets.retain(|s| &*s.name != path[1]),
            (_, "rule") => {
                let handle = match (self.peek_word(), self.toks.get(self.pos + 1)) {
                    (Some("handle"), Some(h)) => self.s(h).parse::<u64>().ok(),
                    _ => None,
                };
                if handle.is_some() {
                    self.pos += 2;
                }
                match (handle, self.chain_index.get(&(ti, path[1])).copied()) {
                    (Some(h), Some(ci)) => {
                        let rules = &mut self.ruleset.tables[ti].chains[ci].rules;
                        rules.retain(|r| match &r.body {
                            RuleBody::Nft(n) => n.handle != Some(h),
                            _ => true,
                        });
                        renumber(rules);
                    }
                    (None, _) => self.error(
                        &obj_tok,
                        "expected 'delete rule [FAMILY] TABLE CHAIN handle N'",
                        object,
                    ),
                    _ => {}
                }
            }
            _ => self.delete_table(ti),
        }
        self.end_of_command(verb_tok);
        true
    }

    /// `[FAMILY] NAME...`: `words` names after an optional family, up to a brace or the
    /// end of the statement.
    fn object_path(&mut self, words: usize) -> Option<(Family, [&'a str; 2])> {
        let mut found: Vec<&'a str> = Vec::with_capacity(3);
        while found.len() < words + 1 {
            match self.toks.get(self.pos + found.len()) {
                Some(t) if t.kind == Tok::Word => found.push(self.s(t)),
                _ => break,
            }
        }
        let has_family = found.len() > words && FAMILIES.contains(&found[0]);
        if found.len() < words {
            return None;
        }
        let family = match has_family {
            true => Family::parse(found[0]).unwrap_or(Family::Ip),
            false => Family::Ip,
        };
        let names = &found[usize::from(has_family)..usize::from(has_family) + words];
        self.pos += usize::from(has_family) + words;
        let first = unquote(names[0]);
        let second = names.get(1).map_or("", |n| unquote(n));
        Some((family, [first, second]))
    }

    /// After a command: nothing but the end of the statement may follow.
    fn end_of_command(&mut self, verb: Token) {
        let rest = self.skip_statement();
        if !rest.trim().is_empty() {
            let text = rest.to_string();
            self.error(
                &verb,
                format!("unexpected '{text}' after the command"),
                &text,
            );
        }
    }

    fn delete_chain(&mut self, ti: usize, name: &'a str) {
        if let Some(ci) = self.chain_index.remove(&(ti, name)) {
            self.dead_chains.insert((ti, ci));
            if self.deleted_names.insert((ti, name)) {
                self.ruleset.tables[ti].deleted_chains.push(name.into());
            }
        }
    }

    fn delete_table(&mut self, ti: usize) {
        self.dead_tables.insert(ti);
        self.chain_index.retain(|(t, _), _| *t != ti);
    }

    /// Drops what the script deleted (after reading: indexes no longer matter).
    pub(super) fn remove_deleted(&mut self) {
        for (ti, table) in self.ruleset.tables.iter_mut().enumerate() {
            let mut ci = 0;
            table.chains.retain(|_| {
                ci += 1;
                !self.dead_chains.contains(&(ti, ci - 1))
            });
        }
        let mut ti = 0;
        self.ruleset.tables.retain(|_| {
            ti += 1;
            !self.dead_tables.contains(&(ti - 1))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_text;
    use super::super::tests::errors;
    use crate::model::{Completeness, Family, Hook};

    /// kube-proxy's nftables transaction shape: declarations, elements, rules.
    const SCRIPT: &str = "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP\" ; }
add chain ip kube-proxy services
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy service-A
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add element ip kube-proxy service-ips { 10.43.0.1 . tcp . 443 : goto service-A }
add rule ip kube-proxy service-A numgen random mod 2 vmap { 0 : goto ep-1 , 1 : goto ep-2 }
insert rule ip kube-proxy service-A ip saddr != 10.42.0.0/16 jump mark-for-masquerade
";

    #[test]
    fn a_script_builds_the_tables_it_declares_and_is_partial() {
        let rs = parse_text(SCRIPT);
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        assert_eq!(rs.completeness, Completeness::Partial);
        assert!(
            rs.diagnostics
                .iter()
                .any(|d| d.message.contains("nft script"))
        );
        let t = &rs.tables[0];
        assert_eq!((&*t.name, t.family), ("kube-proxy", Family::Ip));
        let pre = t.chain("nat-prerouting").unwrap();
        assert_eq!(pre.base.as_ref().unwrap().hook, Hook::Prerouting);
        let svc = t.chain("service-A").unwrap();
        // `insert` puts the rule first; positions follow.
        assert!(svc.rules[0].text.starts_with("ip saddr != 10.42.0.0/16"));
        assert_eq!(
            svc.rules.iter().map(|r| r.position).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(svc.rules[0].location.line, 10);
        let map = t.sets.iter().find(|s| &*s.name == "service-ips").unwrap();
        assert!(map.is_verdict_map());
        assert_eq!(map.elements.len(), 1);
        assert_eq!(&*map.elements[0].key_text, "10.43.0.1 . tcp . 443");
    }

    #[test]
    fn flush_and_delete_commands_change_what_the_script_built() {
        let script = format!(
            "{SCRIPT}flush chain ip kube-proxy service-A
delete element ip kube-proxy service-ips {{ 10.43.0.1 . tcp . 443 }}
delete chain ip kube-proxy services
add element ip kube-proxy service-ips {{ 10.43.0.10 . udp . 53 : goto service-A }}
"
        );
        let rs = parse_text(&script);
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let t = &rs.tables[0];
        assert!(t.chain("service-A").unwrap().rules.is_empty());
        assert!(t.chain("services").is_none());
        assert_eq!(&*t.deleted_chains[0], "services");
        // The index still finds the chains after the deleted one.
        assert!(t.chain("nat-prerouting").is_some());
        let map = t.sets.iter().find(|s| &*s.name == "service-ips").unwrap();
        let keys: Vec<&str> = map.elements.iter().map(|e| &*e.key_text).collect();
        assert_eq!(keys, ["10.43.0.10 . udp . 53"]);
        let rs = parse_text(&format!("{SCRIPT}flush ruleset\n"));
        assert!(rs.tables.is_empty());
    }

    #[test]
    fn deleted_chains_and_tables_keep_the_rest_addressable() {
        let rs = parse_text(
            "add table ip a\nadd table ip b\nadd chain ip a x\nadd chain ip a y\nadd chain ip a z\n\
             add chain ip b w\ndelete chain ip a y\ndelete table ip a\nadd table ip a\n\
             add rule ip b w accept\nadd chain ip b v\ndelete chain ip b v\nadd chain ip b v\n\
             add rule ip b v drop\nadd rule ip b v counter\ndelete rule ip b v\n",
        );
        // `delete rule` without a handle is an error that does not eat the next line.
        let e = errors(&rs);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("16:") && e[0].contains("handle N"), "{e:?}");
        let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(
            names,
            ["b", "a"],
            "deleted table a is gone, the re-added one is new"
        );
        assert!(rs.tables[1].chains.is_empty());
        let b = &rs.tables[0];
        // Rules added after the deletions land in the right chains.
        assert_eq!(b.chain("w").unwrap().rules[0].text.as_str(), "accept");
        let v = b.chain("v").unwrap();
        assert_eq!(v.rules.len(), 2);
        assert_eq!(v.rules[0].text.as_str(), "drop");
        // Deleted, then added again: it exists, so no reference to it is dangling.
        assert!(b.deleted_chains.is_empty(), "{:?}", b.deleted_chains);
    }

    #[test]
    fn flush_or_delete_in_an_undeclared_table_invents_no_table() {
        let rs =
            parse_text("flush chain ip nat X\ndelete element ip t s { 1.2.3.4 }\nadd table ip k\n");
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["k"]);
    }

    #[test]
    fn rule_commands_cut_short_are_errors_not_panics() {
        for text in [
            "add rule ip t c",
            "insert rule t c",
            "add rule ip t c position",
            "add rule ip t c position 3",
            "add rule ip t c\n",
            "delete rule ip t c handle",
        ] {
            let rs = parse_text(text);
            assert!(
                !errors(&rs).is_empty() || text.starts_with("delete"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_script_that_starts_with_flush_ruleset_is_the_whole_ruleset() {
        let rs = parse_text(
            "flush ruleset\ntable inet filter {\n chain input { type filter hook input priority 0; policy drop; }\n}\nadd rule inet filter input accept\n",
        );
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        assert_eq!(rs.completeness, Completeness::Full);
        assert_eq!(rs.tables[0].chains[0].rules.len(), 1);
    }

    #[test]
    fn bad_script_commands_say_where() {
        let rs = parse_text("add chain ip\nadd table ip t\nadd element ip t s 1.2.3.4\n");
        let e = errors(&rs);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains("1:") && e[0].contains("TABLE NAME"), "{e:?}");
        assert!(e[1].contains("3:") && e[1].contains("ELEMENT"), "{e:?}");
        // Commands that do not build a ruleset are noted and skipped, as before.
        let rs = parse_text("list ruleset\n");
        assert!(errors(&rs).is_empty());
        assert!(rs.diagnostics.iter().any(|d| d.message.contains("skipped")));
    }
}
