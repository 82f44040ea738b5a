// Upload page: sends each chosen or dropped file with its own PUT (one at a time, so a
// large file gets the whole connection), shows its progress, and lists the directory.
'use strict';
(function () {
	const app = document.getElementById('app');
	const maxBytes = Number(app.dataset.max);
	const input = document.getElementById('files');
	const drop = document.getElementById('drop');
	const current = document.getElementById('current');
	const queue = document.getElementById('queue');
	const status = document.getElementById('status');
	const list = document.getElementById('list');
	const listNote = document.getElementById('list-note');
	// The link ends with '/'; file names are appended to it.
	const base = location.pathname.endsWith('/') ? location.pathname : location.pathname + '/';

	const pending = [];
	let busy = false;
	let saved = 0, failed = 0;

	// Binary units, as the server's messages use.
	function human(n) {
		if (n < 1024) return n + ' B';
		const units = ['KiB', 'MiB', 'GiB', 'TiB'];
		let i = -1;
		do { n /= 1024; i++; } while (n >= 1024 && i < units.length - 1);
		return n.toFixed(1) + ' ' + units[i];
	}

	function el(tag, cls, text) {
		const e = document.createElement(tag);
		if (cls) e.className = cls;
		if (text !== undefined) e.textContent = text;
		return e;
	}

	function say(text, kind) {
		status.textContent = text;
		status.className = 'status' + (kind ? ' ' + kind : '');
	}

	function add(files) {
		if (!files || files.length === 0) return;
		current.hidden = false;
		for (const file of files) {
			const li = el('li');
			const name = el('span', 'name', file.name);
			const cancel = el('button', '', 'Cancel');
			cancel.type = 'button';
			cancel.setAttribute('aria-label', 'Cancel upload of ' + file.name);
			const bar = el('progress');
			bar.max = Math.max(file.size, 1);
			bar.value = 0;
			bar.setAttribute('aria-label', 'Upload of ' + file.name);
			const state = el('span', 'state', 'Waiting (' + human(file.size) + ')');
			li.append(name, cancel, bar, state);
			queue.append(li);
			const job = { file, li, bar, state, cancel, xhr: null, cancelled: false };
			cancel.addEventListener('click', () => stop(job));
			if (file.size > maxBytes) {
				finish(job, false, 'Too large: ' + human(file.size) + '; the limit is ' + app.dataset.maxText + ' per file. Not uploaded.');
				continue;
			}
			pending.push(job);
		}
		input.value = '';
		next();
	}

	function stop(job) {
		job.cancelled = true;
		if (job.xhr) {
			job.xhr.abort();
		} else {
			const i = pending.indexOf(job);
			if (i >= 0) pending.splice(i, 1);
			finish(job, false, 'Cancelled. Nothing was saved.');
		}
	}

	function finish(job, ok, text) {
		job.li.classList.add(ok ? 'ok' : 'failed');
		job.state.textContent = text;
		job.cancel.remove();
		if (ok) {
			job.bar.value = job.bar.max;
			saved++;
		} else {
			failed++;
		}
	}

	function next() {
		if (busy) return;
		const job = pending.shift();
		if (!job) {
			summary();
			refresh();
			return;
		}
		busy = true;
		say('Uploading ' + job.file.name + '…');
		send(job);
	}

	function send(job) {
		const xhr = new XMLHttpRequest();
		job.xhr = xhr;
		xhr.open('PUT', base + encodeURIComponent(job.file.name));
		xhr.setRequestHeader('Accept', 'application/json');
		xhr.upload.addEventListener('progress', (e) => {
			if (!e.lengthComputable) return;
			job.bar.max = Math.max(e.total, 1);
			job.bar.value = e.loaded;
			job.state.textContent = Math.floor(100 * e.loaded / Math.max(e.total, 1)) + ' % of ' + human(e.total);
		});
		const done = () => { job.xhr = null; busy = false; next(); };
		xhr.addEventListener('load', () => {
			let body = {};
			try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
			if (xhr.status === 201) {
				finish(job, true, body.message || 'Saved.');
			} else {
				finish(job, false, body.error || ('The server answered ' + xhr.status + '. Nothing was saved.'));
			}
			done();
		});
		xhr.addEventListener('error', () => {
			finish(job, false, 'The connection broke before the file arrived. Nothing was saved; try again.');
			done();
		});
		xhr.addEventListener('abort', () => {
			finish(job, false, 'Cancelled. Nothing was saved.');
			done();
		});
		xhr.send(job.file);
	}

	function summary() {
		const total = saved + failed;
		if (total === 0) return;
		if (failed === 0) {
			say((saved === 1 ? 'The file is' : 'All ' + saved + ' files are') + ' in ' + app.dataset.dir + '. Go back to the conversation and say they are here.', 'ok');
		} else if (saved === 0) {
			say((failed === 1 ? 'The upload' : 'All ' + failed + ' uploads') + ' failed. See the messages above.', 'failed');
		} else {
			say(saved + ' of ' + total + ' files were saved; ' + failed + ' failed. See the messages above.', 'failed');
		}
	}

	function refresh() {
		fetch(base + '?list', { headers: { Accept: 'application/json' }, cache: 'no-store' })
			.then((r) => r.json().then((body) => ({ ok: r.ok, body })))
			.then(({ ok, body }) => {
				if (!ok) throw new Error(body.error || 'listing failed');
				const tbody = list.tBodies[0];
				tbody.replaceChildren();
				for (const f of body.files) {
					const tr = el('tr');
					const when = new Date(f.modified);
					tr.append(el('td', '', f.name), el('td', 'num', human(f.size)), el('td', '', when.toLocaleString()));
					tbody.append(tr);
				}
				list.hidden = body.files.length === 0;
				listNote.textContent = body.files.length === 0 ? 'No files yet.' : '';
				listNote.hidden = body.files.length !== 0;
			})
			.catch((e) => {
				listNote.hidden = false;
				listNote.textContent = 'The list could not be loaded (' + e.message + ').';
			});
	}

	input.addEventListener('change', () => add(Array.from(input.files)));
	drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
	drop.addEventListener('dragleave', () => drop.classList.remove('over'));
	// A file dropped anywhere on the page is uploaded, never opened by the browser.
	document.addEventListener('dragover', (e) => e.preventDefault());
	document.addEventListener('drop', (e) => {
		e.preventDefault();
		drop.classList.remove('over');
		add(Array.from(e.dataTransfer.files));
	});
	window.addEventListener('beforeunload', (e) => {
		if (busy) e.preventDefault();
	});
	refresh();
})();
